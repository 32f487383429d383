package cli

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap"

	"github.com/oncerun/oncerun/internal/pgtest"
	"github.com/oncerun/oncerun/internal/settings"
	"github.com/oncerun/oncerun/internal/spend"
)

// limitsEnv is an environment whose ONCERUN_LIMITS_FILE is a file of
// content, with the database at url.
func limitsEnv(t *testing.T, content, url string) (Env, string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "limits.yaml")
	require.NoError(t, os.WriteFile(path, []byte(content), 0o600))
	vars := map[string]string{settings.EnvLimitsFile: path, settings.EnvDatabaseURL: url, settings.EnvTemporalAddress: "127.0.0.1:1"}
	return Env{Getenv: func(name string) string { return vars[name] }}, path
}

const limitsYAML = `limits:
  - tenant: acme
    name: credits
    tools: [issue_credit]
    currency: EUR
    amount: 200000
  - tenant: globex
    name: refunds
    tools: [refund_payment]
    currency: usd
    amount: 5000
    period: rolling_24h
`

// TestServeRefusesAnInvalidLimitsFile: serve stops at once on a limits
// file that is not valid, naming the variable, the limit and the field,
// before it reaches Temporal or the database.
func TestServeRefusesAnInvalidLimitsFile(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ name, content, want string }{
		{"zero amount", "limits:\n  - {tenant: acme, name: credits, tools: [issue_credit], currency: EUR, amount: 0}\n",
			"limit 1 (credits): invalid limit: amount: 0"},
		{"unknown tool", "limits:\n  - {tenant: acme, name: credits, tools: [issue_bonus], currency: EUR, amount: 1}\n",
			`limit 1 (credits): invalid limit: tools: "issue_bonus" is not a registered tool`},
		{"no tenant", "limits:\n  - {name: credits, tools: [issue_credit], currency: EUR, amount: 1}\n", "limit 1 (credits): invalid limit: tenant"},
		{"unknown field", "limits:\n  - {tenant: acme, name: credits, tools: [issue_credit], currency: EUR, amount: 1, cap: 2}\n", "field cap not found"},
		{"twice", limitsYAML + "  - {tenant: acme, name: credits, tools: [issue_credit], currency: EUR, amount: 1}\n",
			"limit 3: invalid limit: name: tenant acme has two limits named credits"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			env, path := limitsEnv(t, tc.content, unreachable.DatabaseURL)
			start := time.Now()
			_, err := run(t, env, "serve")
			require.Error(t, err)
			assert.Contains(t, err.Error(), "ONCERUN_LIMITS_FILE: limits file "+path)
			assert.Contains(t, err.Error(), tc.want)
			assert.Less(t, time.Since(start), 2*time.Second, "refused before connecting")
		})
	}
}

// TestLimitsFileIsAppliedOnceMigrated: serve's path migrates an empty
// database and sets every cap of the file, as set by "file:<path>",
// replacing a cap of the same name; without the variable there is no
// file.
func TestLimitsFileIsAppliedOnceMigrated(t *testing.T) {
	t.Parallel()
	db := pgtest.NewEmptyDB(t)
	env, path := limitsEnv(t, limitsYAML, db.URL)
	f, err := env.LimitsFile()
	require.NoError(t, err)
	require.NotNil(t, f)
	ctx := context.Background()
	require.NoError(t, f.applyMigrated(ctx, db.URL, zap.NewNop()))
	require.NoError(t, f.applyMigrated(ctx, db.URL, zap.NewNop()), "again changes nothing but the time")

	conn := pgtest.Connect(t, db)
	acme, err := spend.ListCaps(ctx, conn, "acme")
	require.NoError(t, err)
	require.Len(t, acme, 1)
	assert.Equal(t, []any{"credits", int64(200000), "EUR", spend.PeriodDay, "file:" + path},
		[]any{acme[0].Name, acme[0].Amount, acme[0].Currency, acme[0].Period, acme[0].UpdatedBy})
	globex, err := spend.ListCaps(ctx, conn, "globex")
	require.NoError(t, err)
	require.Len(t, globex, 1)
	assert.Equal(t, []any{"refunds", "USD", spend.PeriodRolling}, []any{globex[0].Name, globex[0].Currency, globex[0].Period})

	none, err := Env{}.LimitsFile()
	require.NoError(t, err)
	assert.Nil(t, none)
}

// TestLimitsFileSetupRunsTheDeploymentsFirst: as a worker's Setup, the
// file is applied after the deployment's own setup, and not when that
// fails.
func TestLimitsFileSetupRunsTheDeploymentsFirst(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t, 2)
	env, _ := limitsEnv(t, limitsYAML, "")
	f, err := env.LimitsFile()
	require.NoError(t, err)
	ctx := context.Background()
	var order []string
	failing := func(context.Context, *pgxpool.Pool) error { order = append(order, "deployment"); return assert.AnError }
	require.ErrorIs(t, f.Setup(failing, zap.NewNop())(ctx, pool), assert.AnError)
	us, err := spend.ListCaps(ctx, pool, "acme")
	require.NoError(t, err)
	assert.Empty(t, us, "not applied after a failed setup")

	require.NoError(t, f.Setup(nil, zap.NewNop())(ctx, pool))
	us, err = spend.ListCaps(ctx, pool, "acme")
	require.NoError(t, err)
	assert.Len(t, us, 1)
	assert.Equal(t, []string{"deployment"}, order)
}
