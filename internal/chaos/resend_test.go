package chaos

import (
	"context"
	"fmt"
	"io"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/oncerun/oncerun/internal/mail"
	"github.com/oncerun/oncerun/internal/mail/mailtest"
	"github.com/oncerun/oncerun/internal/pgtest"
)

// The harness plays the person of docs/external-effects.md for a message
// of unknown delivery: one already in the mailbox is left there, one that
// is not is sent by hand under oncerun's Message-ID, and a message whose
// delivery was recorded otherwise is never sent by the harness.
func TestTheHarnessResendsByHandOnlyWhatIsUnknownAndMissing(t *testing.T) {
	box, err := mailtest.Start(mailtest.Config{})
	require.NoError(t, err)
	t.Cleanup(func() { _ = box.Close() })
	h := &harness{out: io.Discard, pool: pgtest.NewPool(t, 2), mail: box}
	ctx := context.Background()
	domain := mailFrom[strings.LastIndex(mailFrom, "@")+1:]
	outbox := func(run, state string) string {
		key := fmt.Sprintf("v1/%s/%s/%d/send_email.1", tenant, run, stepCredit)
		_, err := h.pool.Exec(ctx, `INSERT INTO outbox (tenant, run_id, step, seq, key, tool, args, args_hash, state)
VALUES ($1, $2, $3, 1, $4, 'send_email', $5, repeat('a', 64), $6)`, tenant, run, stepCredit, key,
			fmt.Sprintf(`{"to":"%s@example.com","subject":"Your credit","body":"50.00 EUR"}`, run), state)
		require.NoError(t, err)
		return key
	}
	arrived := outbox("arrived", "unknown")
	lost := outbox("lost", "unknown")
	outbox("delivered", "delivered")
	outbox("failed", "failed")
	mc, err := mail.New(mail.Config{Addr: box.Addr(), From: mailFrom})
	require.NoError(t, err)
	_, err = mc.Send(ctx, mail.Message{To: []string{"arrived@example.com"}, Subject: "Your credit", Body: "50.00 EUR",
		MessageID: mail.MessageID(arrived, domain)})
	require.NoError(t, err)

	sent, err := h.resendByHand(ctx)
	require.NoError(t, err)
	assert.Equal(t, 1, sent)
	msgs := box.Messages()
	require.Len(t, msgs, 2)
	assert.Equal(t, []string{"lost@example.com"}, msgs[1].To)
	assert.Equal(t, mail.MessageID(lost, domain), msgs[1].MessageID)

	sent, err = h.resendByHand(ctx)
	require.NoError(t, err)
	assert.Zero(t, sent, "a message in the mailbox is not sent again")
	assert.Len(t, box.Messages(), 2)
}
