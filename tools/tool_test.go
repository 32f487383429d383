package tools_test

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/oncerun/oncerun/internal/idempotency"
	"github.com/oncerun/oncerun/tools"
)

func TestBeforeSend(t *testing.T) {
	t.Parallel()
	canceled, cancel := context.WithCancelCause(context.Background())
	cancel(errors.New("lease lost"))
	late, stop := context.WithDeadline(context.Background(), time.Now().Add(time.Hour))
	defer stop()
	for _, tt := range []struct {
		name string
		ctx  context.Context
		want string
	}{
		{"no deadline", context.Background(), ""},
		{"deadline ahead", late, ""},
		{"ended", canceled, "lease lost"},
		{"a deadline passed is the caller's business", pastDeadline{context.Background()}, ""},
		{"send-by ahead", idempotency.WithSendBy(context.Background(), time.Now().Add(time.Minute)), ""},
		{"send-by passed, not yet done", idempotency.WithSendBy(context.Background(), time.Now().Add(-time.Second)), "lease may have expired"},
	} {
		err := tools.BeforeSend(tt.ctx)
		if tt.want == "" {
			assert.NoError(t, err, tt.name)
			continue
		}
		assert.ErrorIs(t, err, tools.ErrNotApplied, tt.name)
		assert.ErrorContains(t, err, tt.want, tt.name)
	}
}

// pastDeadline is a context whose deadline passed while nothing ran to
// close its Done: a process that was frozen and has just come back.
type pastDeadline struct{ context.Context }

func (pastDeadline) Deadline() (time.Time, bool) { return time.Now().Add(-time.Second), true }

// TestFoundReadsAPairedReadsAnswer: "found" must be a boolean; anything
// else is an error that names the read.
func TestFoundReadsAPairedReadsAnswer(t *testing.T) {
	for answer, want := range map[string]bool{`{"found": true, "refund": {}}`: true, `{"found": false}`: false} {
		got, err := tools.Found("get_refund", json.RawMessage(answer))
		require.NoError(t, err, answer)
		assert.Equal(t, want, got, answer)
	}
	for _, answer := range []string{`{"found": "yes"}`, `{"refund": {}}`, `[true]`, `not json`} {
		_, err := tools.Found("get_refund", json.RawMessage(answer))
		require.ErrorContains(t, err, `paired read get_refund returned no boolean "found" field`, answer)
	}
}
