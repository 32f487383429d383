package activities_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/oncerun/oncerun/internal/idempotency"
	"github.com/oncerun/oncerun/internal/keys"
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
