package mail_test

import (
	"context"
	"encoding/json"
	"errors"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/temporal"

	"github.com/oncerun/oncerun/internal/keys"
	"github.com/oncerun/oncerun/internal/mail"
	"github.com/oncerun/oncerun/internal/mail/mailtest"
	"github.com/oncerun/oncerun/tools"
)

func toolCall(t *testing.T) tools.Call {
	k, err := keys.New("acme", "r1", 2, mail.SendEmail)
	require.NoError(t, err)
	return tools.Call{Key: k, Args: json.RawMessage(`{"to":"ada@example.com","subject":"Hello","body":"Hi Ada"}`)}
}

func sendEmail(t *testing.T) (tools.Tool, *mailtest.Server) {
	t.Helper()
	srv, err := mailtest.Start(mailtest.Config{})
	require.NoError(t, err)
	t.Cleanup(func() { _ = srv.Close() })
	c, err := mail.New(mail.Config{Addr: srv.Addr()})
	require.NoError(t, err)
	return mail.Tool(c, "shop.example"), srv
}

func permanent(err error) bool {
	var app *temporal.ApplicationError
	return errors.As(err, &app) && app.NonRetryable()
}

func TestSendEmailToolSendsWithTheKeysMessageID(t *testing.T) {
	t.Parallel()
	tool, srv := sendEmail(t)
	call := toolCall(t)
	res, err := tool.Run(context.Background(), call)
	require.NoError(t, err)
	sent := res.(mail.Sent)
	want := mail.MessageID(call.Key.String(), "shop.example")
	assert.Equal(t, want, sent.MessageID)
	msgs := srv.Messages()
	require.Len(t, msgs, 1)
	assert.Equal(t, want, msgs[0].MessageID)
	assert.Equal(t, tools.GuaranteeAtLeastOnce, tool.Guarantee())
}

func TestSendEmailToolClassifiesFailures(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name       string
		fault      func(*mailtest.Server)
		notApplied bool
		permanent  bool
		stored     int
	}{
		{"recipient refused for good", func(s *mailtest.Server) { s.RejectRcpt(1) }, true, true, 0},
		{"message refused for good", func(s *mailtest.Server) { s.RejectData(1) }, true, true, 0},
		{"acceptance lost", func(s *mailtest.Server) { s.DropAfterAccept(1) }, false, false, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tool, srv := sendEmail(t)
			tc.fault(srv)
			_, err := tool.Run(context.Background(), toolCall(t))
			require.Error(t, err)
			assert.Equal(t, tc.notApplied, errors.Is(err, tools.ErrNotApplied), "%v", err)
			assert.Equal(t, tc.permanent, permanent(err), "%v", err)
			assert.Len(t, srv.Messages(), tc.stored)
		})
	}
}

func TestSendEmailToolWithoutAServerRefusesBeforeSending(t *testing.T) {
	t.Parallel()
	_, err := mail.Tool(nil, "").Run(context.Background(), toolCall(t))
	assert.True(t, errors.Is(err, tools.ErrNotApplied))
	assert.True(t, permanent(err))
}
