package runs_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/mock"
	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/mocks"

	"github.com/oncerun/oncerun/internal/pgtest"
	"github.com/oncerun/oncerun/internal/runs"
	"github.com/oncerun/oncerun/internal/sdkfake"
	"github.com/oncerun/oncerun/internal/spend"
	"github.com/oncerun/oncerun/workflows"
)

// charge counts amount of currency for step of a run of tenant as applied.
func charge(t *testing.T, db spend.DB, tenant, runID string, step int64, currency string, amount int64) {
	t.Helper()
	_, err := spend.ChargeTx(context.Background(), db, spend.Charge{Tenant: tenant, RunID: runID, Step: step, Tool: "issue_credit",
		Key: fmt.Sprintf("v1/%s/%s/%d/issue_credit", tenant, runID, step), Amounts: spend.Amounts{currency: amount}})
	require.NoError(t, err)
}

// TestStatusReadsTheRunsSpend: with a pool, Status fills Spend with what
// the run's steps counted per currency beside its budget, a currency of
// the budget with nothing counted at 0, and nothing of another run or
// tenant; without one, Spend stays empty.
func TestStatusReadsTheRunsSpend(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t, 2)
	charge(t, pool, "acme", "r1", 2, "EUR", 25900)
	charge(t, pool, "acme", "r1", 3, "EUR", 1500)
	charge(t, pool, "acme", "r2", 2, "EUR", 99900)
	charge(t, pool, "globex", "r1", 2, "EUR", 77700)
	tc := &mocks.Client{}
	tc.On("QueryWorkflow", mock.Anything, wid, "", workflows.QueryStatus).Return(
		sdkfake.Value{V: workflows.Status{Tenant: "acme", RunID: "r1", Budget: map[string]int64{"EUR": 50000, "USD": 1000}}}, nil)

	st, err := (&runs.Client{Temporal: tc, Pool: pool}).Status(context.Background(), "acme", "r1")
	require.NoError(t, err)
	eur, usd := int64(50000), int64(1000)
	assert.Equal(t, []workflows.SpendTotal{
		{Currency: "EUR", Spent: 27400, Budget: &eur},
		{Currency: "USD", Budget: &usd},
	}, st.Spend)

	st, err = (&runs.Client{Temporal: tc}).Status(context.Background(), "acme", "r1")
	require.NoError(t, err)
	assert.Empty(t, st.Spend, "no pool, no spend")
}
