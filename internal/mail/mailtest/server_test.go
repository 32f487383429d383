package mailtest_test

import (
	"strings"
	"testing"

	"github.com/emersion/go-smtp"
	"github.com/stretchr/testify/require"

	"github.com/oncerun/oncerun/internal/mail/mailtest"
)

// setup starts a server that is closed when the test ends.
func setup(t *testing.T, cfg mailtest.Config) *mailtest.Server {
	t.Helper()
	srv, err := mailtest.Start(cfg)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, srv.Close()) })
	return srv
}

const base64Message = "From: a@example.com\r\n" +
	"To: b@example.com\r\n" +
	"Subject: =?utf-8?q?Gr=C3=BC=C3=9Fe?=\r\n" +
	"Message-ID: <1@example.com>\r\n" +
	"Content-Transfer-Encoding: base64\r\n" +
	"\r\n" +
	"R3LDvMOfZQpsaW5lIHR3bwo=\r\n"

// send delivers raw with go-smtp's client.
func send(t *testing.T, srv *mailtest.Server, raw string) error {
	t.Helper()
	c, err := smtp.Dial(srv.Addr())
	require.NoError(t, err)
	defer c.Close()
	return c.SendMail("a@example.com", []string{"b@example.com"}, strings.NewReader(raw))
}

func TestMessagesDecodesHeadersAndBody(t *testing.T) {
	t.Parallel()
	srv := setup(t, mailtest.Config{})

	require.NoError(t, send(t, srv, base64Message))

	got := srv.Messages()
	require.Len(t, got, 1)
	require.Equal(t, "a@example.com", got[0].From)
	require.Equal(t, []string{"b@example.com"}, got[0].To)
	require.Equal(t, "<1@example.com>", got[0].MessageID)
	require.Equal(t, "Grüße", got[0].Subject)
	require.Equal(t, "Grüße\nline two\n", got[0].Body)
	require.Equal(t, base64Message, string(got[0].Data))
	require.False(t, got[0].TLS)
	require.Equal(t, 1, srv.Connections())
}

func TestFaultsWearOff(t *testing.T) {
	t.Parallel()
	tests := map[string]struct {
		inject func(*mailtest.Server)
		code   int // reply code of the first send; 0 means no reply
		stored int // messages stored by the first send
	}{
		"reject rcpt":       {inject: func(s *mailtest.Server) { s.RejectRcpt(1) }, code: 550},
		"reject data":       {inject: func(s *mailtest.Server) { s.RejectData(1) }, code: 554},
		"drop after accept": {inject: func(s *mailtest.Server) { s.DropAfterAccept(1) }, stored: 1},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			srv := setup(t, mailtest.Config{})
			tt.inject(srv)

			err := send(t, srv, base64Message)
			require.Error(t, err)
			var reply *smtp.SMTPError
			if tt.code != 0 {
				require.ErrorAs(t, err, &reply)
				require.Equal(t, tt.code, reply.Code)
			} else {
				require.NotErrorAs(t, err, &reply)
			}
			require.Len(t, srv.Messages(), tt.stored)

			require.NoError(t, send(t, srv, base64Message))
			require.Len(t, srv.Messages(), tt.stored+1)
		})
	}
}

func TestAuthRequiredWhenCredentialsSet(t *testing.T) {
	t.Parallel()
	srv := setup(t, mailtest.Config{Username: "agent", Password: "s3cret", AllowInsecureAuth: true})

	err := send(t, srv, base64Message)

	var reply *smtp.SMTPError
	require.ErrorAs(t, err, &reply)
	require.Equal(t, smtp.ErrAuthRequired.Code, reply.Code)
	require.Empty(t, srv.Messages())
}
