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
	"github.com/oncerun/oncerun/workflows"
)

// The harness plays the person of docs/external-effects.md for a message
// of unknown delivery: one already in the mailbox is left there, one that
// is not is sent by hand under oncerun's Message-ID, and a message whose
// delivery was recorded otherwise is never sent by the harness.
func TestTheHarnessResendsByHandOnlyWhatIsUnknownAndMissing(t *testing.T) {
	box, err := mailtest.Start(mailtest.Config{})
	require.NoError(t, err)
	t.Cleanup(func() { _ = box.Close() })
	h := &harness{out: io.Discard, pool: pgtest.NewPool(t, 2), mail: box, runs: []runPlan{
		{runID: "arrived"}, {runID: "lost"}, {runID: "delivered"}, {runID: "failed"}, {runID: "parent", delegate: true},
	}}
	ctx := context.Background()
	domain := mailFrom[strings.LastIndex(mailFrom, "@")+1:]
	outbox := func(to string, ref stepRef, state string) string {
		key := fmt.Sprintf("v1/%s/%s/%d/send_email.1", tenant, ref.runID, ref.step)
		_, err := h.pool.Exec(ctx, `INSERT INTO outbox (tenant, run_id, step, seq, key, tool, args, args_hash, state)
VALUES ($1, $2, $3, 1, $4, 'send_email', $5, repeat('a', 64), $6)`, tenant, ref.runID, ref.step, key,
			fmt.Sprintf(`{"to":"%s@example.com","subject":"Your credit","body":"50.00 EUR"}`, to), state)
		require.NoError(t, err)
		return key
	}
	arrived := outbox("arrived", stepRef{"arrived", stepCredit}, "unknown")
	lost := outbox("lost", stepRef{"lost", stepCredit}, "unknown")
	outbox("delivered", stepRef{"delivered", stepCredit}, "delivered")
	outbox("failed", stepRef{"failed", stepCredit}, "failed")
	// A delegating run's credit is its child's first step; the parent's
	// own step of that number makes no e-mail.
	child := outbox("child", stepRef{workflows.ChildRunID("parent", stepCredit), 1}, "unknown")
	outbox("not-a-credit", stepRef{"arrived", stepRefund}, "unknown")
	mc, err := mail.New(mail.Config{Addr: box.Addr(), From: mailFrom})
	require.NoError(t, err)
	_, err = mc.Send(ctx, mail.Message{To: []string{"arrived@example.com"}, Subject: "Your credit", Body: "50.00 EUR",
		MessageID: mail.MessageID(arrived, domain)})
	require.NoError(t, err)

	sent, err := h.resendByHand(ctx)
	require.NoError(t, err)
	assert.Equal(t, 2, sent)
	msgs := box.Messages()
	require.Len(t, msgs, 3)
	ids := map[string]string{}
	for _, m := range msgs[1:] {
		ids[m.To[0]] = m.MessageID
	}
	assert.Equal(t, map[string]string{"lost@example.com": mail.MessageID(lost, domain), "child@example.com": mail.MessageID(child, domain)}, ids,
		"the lost message and the child's are sent, not a step's that made no credit")

	sent, err = h.resendByHand(ctx)
	require.NoError(t, err)
	assert.Zero(t, sent, "a message in the mailbox is not sent again")
	assert.Len(t, box.Messages(), 3)
}
