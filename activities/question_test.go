package activities_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/oncerun/oncerun/activities"
	"github.com/oncerun/oncerun/internal/approvalstore"
	"github.com/oncerun/oncerun/internal/keys"
	"github.com/oncerun/oncerun/internal/questions"
)

// wrapQuestion is a live question a gift server asks in the middle of a
// call.
var wrapQuestion = questions.Asked{Server: "gifts", Wait: time.Hour, Items: []questions.Item{{ID: questions.LiveItem,
	Mode: questions.ModeForm, Message: "Which wrapping?", Schema: json.RawMessage(`{"type":"object","properties":{"wrap":{"type":"string"}}}`)}}}

// askLive starts a live question of step 1 of run r1 in the background
// and returns where its answer (or error) comes, once the round is
// recorded.
func askLive(t *testing.T, f fixture, hold time.Duration) <-chan error {
	t.Helper()
	activities.SetLiveHold(f.acts, hold)
	in := input(t, 1, "send_gift", `{"order_id":"1001"}`)
	key, err := keys.New(in.Tenant, in.RunID, in.Step, in.Tool)
	require.NoError(t, err)
	done := make(chan error, 1)
	go func() {
		answers, err := activities.AskLive(f.acts, in, key)(context.Background(), wrapQuestion)
		if err == nil && answers[questions.LiveItem].Action != questions.ActionAccept {
			err = assert.AnError
		}
		done <- err
	}()
	require.Eventually(t, func() bool { return f.count(t, `SELECT count(*) FROM questions WHERE run_id = 'r1'`) == 1 },
		10*time.Second, 10*time.Millisecond)
	return done
}

// answerWrap answers round 1 of step 1 of run r1.
func answerWrap(f fixture) error {
	_, err := approvalstore.Answer(context.Background(), f.pool, approvalstore.AnswerRequest{
		StepRequest: approvalstore.StepRequest{Tenant: "acme", RunID: "r1", Step: 1, By: "dana", Role: "approver", May: true,
			RemoteAddr: "127.0.0.1", Via: approvalstore.ViaAPI},
		Only: &questions.Answer{Action: questions.ActionAccept, Content: json.RawMessage(`{"wrap":"red"}`)},
	})
	return err
}

// A worker that waits for a live question's answer longer than its hold
// keeps the round answerable by renewing the hold.
func TestALiveQuestionsWorkerRenewsItsHold(t *testing.T) {
	t.Parallel()
	f := setup(t)
	done := askLive(t, f, 3*time.Second)

	time.Sleep(5 * time.Second)
	require.NoError(t, answerWrap(f), "the round is still held")
	require.NoError(t, <-done)
	assert.Equal(t, 1, f.count(t, `SELECT count(*) FROM questions WHERE run_id = 'r1' AND state = 'answered'`))
}

// A hold that could not be renewed in time (the worker was frozen, or the
// database away, for longer than the hold) lost the round: the worker stops
// waiting, and the round is recorded lost.
func TestALiveQuestionWhoseHoldLapsedStopsWaiting(t *testing.T) {
	t.Parallel()
	f := setup(t)
	done := askLive(t, f, 3*time.Second)
	_, err := f.pool.Exec(context.Background(), `UPDATE questions SET held_until = statement_timestamp() - interval '1 second' WHERE run_id = 'r1'`)
	require.NoError(t, err)

	select {
	case err := <-done:
		require.Error(t, err)
		assert.Contains(t, err.Error(), "can no longer be answered")
	case <-time.After(10 * time.Second):
		t.Fatal("the worker still waits on a lapsed hold")
	}
	assert.Equal(t, 1, f.count(t, `SELECT count(*) FROM questions WHERE run_id = 'r1' AND state = 'lost' AND note LIKE 'its hold lapsed%'`))
	assert.ErrorIs(t, answerWrap(f), approvalstore.ErrNotPending)
}
