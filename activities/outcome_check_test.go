package activities_test

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/oncerun/oncerun/internal/approvalstore"
	"github.com/oncerun/oncerun/internal/idempotency"
	"github.com/oncerun/oncerun/internal/keys"
	"github.com/oncerun/oncerun/internal/questions"
)

// When a step's retries run out, CheckOutcome decides whether the run waits
// for a person or reports the step failed (and the planner may propose it
// again, under a new key): it must say unknown whenever an attempt may have
// made the effect, an attempt still in flight included.
func TestCheckOutcomeIsUnknownWhileAnAttemptMayHaveMadeTheEffect(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		leave func(t *testing.T, s *idempotency.Store, c idempotency.Claim) // the key's state
	}{
		{"in flight", func(t *testing.T, s *idempotency.Store, c idempotency.Claim) { begin(t, s, c) }},
		{"failed after the effect may have begun", func(t *testing.T, s *idempotency.Store, c idempotency.Claim) {
			require.NoError(t, s.Fail(context.Background(), begin(t, s, c), idempotency.Failure{Message: "timeout"}))
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			f := setup(t)
			in := input(t, 1, "send_gift", `{"order_id":"1001"}`)
			key, err := keys.New(in.Tenant, in.RunID, in.Step, in.Tool)
			require.NoError(t, err)
			tc.leave(t, f.acts.Store, idempotency.Claim{Key: key, ArgsHash: in.ArgsHash})

			check, err := f.acts.CheckOutcome(context.Background(), in)

			require.NoError(t, err)
			assert.True(t, check.Unknown)
			assert.Equal(t, key.String(), check.Resolution.Key)
			assert.Contains(t, check.Resolution.Known, "retries ran out")
		})
	}
}

// begin leases c's key and returns the lease.
func begin(t *testing.T, s *idempotency.Store, c idempotency.Claim) *idempotency.Lease {
	t.Helper()
	b, err := s.Begin(context.Background(), c)
	require.NoError(t, err)
	require.NotNil(t, b.Lease)
	return b.Lease
}

// A step whose key holds no doubt — no attempt at all, an effect recorded,
// or a failure the provider answered before anything happened — is not sent
// to a person: CheckOutcome says so without an error.
func TestCheckOutcomeIsKnownWhenNothingIsInDoubt(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		leave func(t *testing.T, s *idempotency.Store, c idempotency.Claim)
	}{
		{"no attempt", func(*testing.T, *idempotency.Store, idempotency.Claim) {}},
		{"completed", func(t *testing.T, s *idempotency.Store, c idempotency.Claim) {
			_, err := s.Complete(context.Background(), begin(t, s, c), []byte(`{"ok":true}`))
			require.NoError(t, err)
		}},
		{"failed before the effect", func(t *testing.T, s *idempotency.Store, c idempotency.Claim) {
			require.NoError(t, s.Fail(context.Background(), begin(t, s, c), idempotency.Failure{Message: "400 amount_too_large", BeforeEffect: true}))
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			f := setup(t)
			in := input(t, 1, "send_gift", `{"order_id":"1001"}`)
			key, err := keys.New(in.Tenant, in.RunID, in.Step, in.Tool)
			require.NoError(t, err)
			tc.leave(t, f.acts.Store, idempotency.Claim{Key: key, ArgsHash: in.ArgsHash})

			check, err := f.acts.CheckOutcome(context.Background(), in)

			require.NoError(t, err)
			assert.False(t, check.Unknown)
		})
	}
}

// When a step's retries run out, a live question its last attempt left
// pending (its worker died while a person was asked) is lost: nobody is
// left to take its answer to the server, so the inbox stops offering it.
// A durable question of the step is not the call's to lose.
func TestCheckOutcomeLosesTheLiveQuestionsTheLastAttemptLeft(t *testing.T) {
	t.Parallel()
	f := setup(t)
	in := input(t, 1, "send_gift", `{"order_id":"1001"}`)
	key, err := keys.New(in.Tenant, in.RunID, in.Step, in.Tool)
	require.NoError(t, err)
	now := time.Now()
	for _, live := range []bool{true, false} {
		_, err := approvalstore.RecordQuestion(context.Background(), f.pool, approvalstore.QuestionRequest{
			Tenant: in.Tenant, RunID: in.RunID, Step: in.Step, AskID: fmt.Sprintf("live-%t", live), Tool: in.Tool, Key: key.String(),
			Server: "gifts", Args: in.Args, ArgsHash: in.ArgsHash, Live: live, RequestedAt: now, Deadline: now.Add(time.Hour),
			Items: []questions.Item{{ID: questions.LiveItem, Mode: questions.ModeForm, Message: "Which wrapping?",
				Schema: json.RawMessage(`{"type":"object","properties":{"wrap":{"type":"string"}}}`)}},
		})
		require.NoError(t, err)
	}

	_, err = f.env().ExecuteActivity(f.acts.CheckOutcome, in)
	require.NoError(t, err)

	assert.Equal(t, 1, f.count(t, `SELECT count(*) FROM questions WHERE run_id = $1 AND live AND state = 'lost'`, in.RunID))
	assert.Equal(t, 1, f.count(t, `SELECT count(*) FROM questions WHERE run_id = $1 AND NOT live AND state = 'pending'`, in.RunID))
}
