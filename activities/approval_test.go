package activities_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/temporal"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/oncerun/oncerun/activities"
	"github.com/oncerun/oncerun/internal/shop"
)

// approvalRow is a row of the approvals table.
type approvalRow struct {
	Tool      string          `db:"tool"`
	Args      json.RawMessage `db:"args"`
	ArgsHash  string          `db:"args_hash"`
	Goal      string          `db:"goal"`
	Reason    string          `db:"reason"`
	State     string          `db:"state"`
	Deadline  time.Time       `db:"deadline"`
	DecidedBy *string         `db:"decided_by"`
	DecidedAt *time.Time      `db:"decided_at"`
	Comment   string          `db:"comment"`
}

func (f fixture) approvals(t *testing.T) []approvalRow {
	t.Helper()
	rows, err := f.pool.Query(context.Background(), `
SELECT tool, args, args_hash, goal, reason, state, deadline, decided_by, decided_at, comment
FROM approvals ORDER BY tenant, run_id, step`)
	require.NoError(t, err)
	got, err := pgx.CollectRows(rows, pgx.RowToStructByName[approvalRow])
	require.NoError(t, err)
	return got
}

// request is the pending approval of step 2 of run r1 of tenant acme.
func request(t *testing.T) activities.ApprovalRequest {
	t.Helper()
	in := input(t, 2, shop.ToolIssueCredit, `{"order_id":"1001","reason":"damaged","amount_cents":25900,"currency":"EUR"}`)
	now := time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)
	return activities.ApprovalRequest{
		Tenant: in.Tenant, RunID: in.RunID, Step: in.Step, Tool: in.Tool, Args: in.Args, ArgsHash: in.ArgsHash,
		Goal: "refund the damaged order", Reason: "amount_cents above 10000",
		RequestedAt: now, Deadline: now.Add(72 * time.Hour),
	}
}

func TestRequestApprovalOnce(t *testing.T) {
	t.Parallel()
	f := setup(t)
	ctx := context.Background()
	req := request(t)

	require.NoError(t, recorded(f.acts.RequestApproval(ctx, req)))
	retried := req
	retried.Goal, retried.Deadline = "another goal", req.Deadline.Add(time.Hour)
	require.NoError(t, recorded(f.acts.RequestApproval(ctx, retried)))

	got := f.approvals(t)
	require.Len(t, got, 1)
	assert.Equal(t, activities.ApprovalPending, got[0].State)
	assert.Equal(t, "refund the damaged order", got[0].Goal, "a retried request changes nothing")
	assert.True(t, req.Deadline.Equal(got[0].Deadline))
	assert.JSONEq(t, string(req.Args), string(got[0].Args))
	assert.Equal(t, req.ArgsHash, got[0].ArgsHash)
	assert.Equal(t, req.Reason, got[0].Reason)
	assert.Nil(t, got[0].DecidedBy)
	assert.Nil(t, got[0].DecidedAt)
}

func TestRequestApprovalRefusesOtherArgumentsForTheStep(t *testing.T) {
	t.Parallel()
	f := setup(t)
	ctx := context.Background()
	req := request(t)
	require.NoError(t, recorded(f.acts.RequestApproval(ctx, req)))

	other := req
	other.ArgsHash = strings.Repeat("b", 64)
	err := recorded(f.acts.RequestApproval(ctx, other))
	var app *temporal.ApplicationError
	require.ErrorAs(t, err, &app)
	assert.Equal(t, activities.ErrTypeKeyReuse, app.Type())
	assert.True(t, app.NonRetryable())
	assert.Contains(t, err.Error(), req.ArgsHash)
	assert.Equal(t, req.ArgsHash, f.approvals(t)[0].ArgsHash, "the first request's row stays")
}

func TestResolveApproval(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name      string
		state     string
		decidedBy string
	}{
		{"approved", activities.ApprovalApproved, "alice@acme"},
		{"rejected", activities.ApprovalRejected, "bob@acme"},
		{"expired", activities.ApprovalExpired, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			f := setup(t)
			ctx := context.Background()
			req := request(t)
			require.NoError(t, recorded(f.acts.RequestApproval(ctx, req)))
			decided := req.RequestedAt.Add(5 * time.Hour)

			require.NoError(t, f.acts.ResolveApproval(ctx, activities.ApprovalResolution{
				Tenant: req.Tenant, RunID: req.RunID, Step: req.Step,
				State: tt.state, DecidedBy: tt.decidedBy, DecidedAt: decided, Comment: "checked the photos",
			}))
			// A conflicting second decision changes nothing.
			require.NoError(t, f.acts.ResolveApproval(ctx, activities.ApprovalResolution{
				Tenant: req.Tenant, RunID: req.RunID, Step: req.Step,
				State: activities.ApprovalRejected, DecidedBy: "mallory@acme", DecidedAt: decided.Add(time.Hour), Comment: "no",
			}))

			got := f.approvals(t)
			require.Len(t, got, 1)
			assert.Equal(t, tt.state, got[0].State)
			if tt.decidedBy == "" {
				assert.Nil(t, got[0].DecidedBy, "no approver decided an expiry")
			} else if assert.NotNil(t, got[0].DecidedBy) {
				assert.Equal(t, tt.decidedBy, *got[0].DecidedBy)
			}
			require.NotNil(t, got[0].DecidedAt)
			assert.True(t, decided.Equal(*got[0].DecidedAt), "decided at %s", got[0].DecidedAt)
			assert.Equal(t, "checked the photos", got[0].Comment)
		})
	}
}

func TestResolveApprovalOfAnotherStep(t *testing.T) {
	t.Parallel()
	f := setup(t)
	ctx := context.Background()
	req := request(t)
	require.NoError(t, recorded(f.acts.RequestApproval(ctx, req)))

	for _, other := range []activities.ApprovalResolution{
		{Tenant: "globex", RunID: req.RunID, Step: req.Step},
		{Tenant: req.Tenant, RunID: "r2", Step: req.Step},
		{Tenant: req.Tenant, RunID: req.RunID, Step: req.Step + 1},
	} {
		other.State, other.DecidedBy, other.DecidedAt = activities.ApprovalApproved, "alice@acme", time.Now()
		require.NoError(t, f.acts.ResolveApproval(ctx, other))
	}
	got := f.approvals(t)
	require.Len(t, got, 1)
	assert.Equal(t, activities.ApprovalPending, got[0].State)
}

// A run that pauses past the expiry of one of its own keys is warned about
// when it pauses, naming the key and the shortfall.
func TestRequestApprovalWarnsOfAKeyExpiringFirst(t *testing.T) {
	t.Parallel()
	f := setup(t)
	ctx := context.Background()
	core, logs := observer.New(zapcore.WarnLevel)
	f.acts.Log = zap.New(core)
	note := input(t, 1, shop.ToolAddOrderNote, `{"order_id":"1001","text":"damaged"}`)
	_, err := f.acts.RunTool(ctx, note)
	require.NoError(t, err)

	req := request(t)
	req.Deadline = time.Now().Add(400 * 24 * time.Hour) // past the note's 30-day window
	require.NoError(t, recorded(f.acts.RequestApproval(ctx, req)))
	warned := logs.FilterMessageSnippet("approval deadline outlives a key").All()
	require.Len(t, warned, 1)
	assert.Equal(t, "v1/acme/r1/1/add_order_note", warned[0].ContextMap()["key"])

	req.Step, req.Deadline = 3, time.Now().Add(time.Hour)
	other := input(t, 3, shop.ToolIssueCredit, `{"order_id":"1001","reason":"late","amount_cents":25900,"currency":"EUR"}`)
	req.Args, req.ArgsHash = other.Args, other.ArgsHash
	require.NoError(t, recorded(f.acts.RequestApproval(ctx, req)))
	assert.Len(t, logs.FilterMessageSnippet("approval deadline outlives a key").All(), 1, "no warning when every key outlives the deadline")
}

// recorded drops RequestApproval's answer, for tests about the row.
func recorded(_ activities.ApprovalRecorded, err error) error { return err }

// TestRequestApprovalTellsTheRunWhenToWarn checks that recording a pending
// step answers the worker's warning points, longest first, repeats and
// points that are not positive dropped; none configured means the defaults,
// an empty list none.
func TestRequestApprovalTellsTheRunWhenToWarn(t *testing.T) {
	f := setup(t)
	ctx := context.Background()
	base := request(t)
	for i, tc := range []struct {
		points, want []time.Duration
	}{
		{nil, activities.DefaultDeadlineWarnings},
		{[]time.Duration{time.Hour, 48 * time.Hour, time.Hour, 0, -time.Minute}, []time.Duration{48 * time.Hour, time.Hour}},
		{[]time.Duration{}, nil},
	} {
		f.acts.DeadlineWarnings = tc.points
		req := base
		req.Step = int64(i + 1)
		rec, err := f.acts.RequestApproval(ctx, req)
		require.NoError(t, err)
		assert.Equal(t, tc.want, rec.WarnBefore, "points %v", tc.points)
	}
}
