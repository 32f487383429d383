package idempotency

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/oncerun/oncerun/internal/pgtest"
)

// TestHotStatementsUsePrimaryKeyFromEmpty checks the plans PostgreSQL caches
// for the store's statements when a worker starts against an empty table.
// A generic plan that scans another index over the whole tenant makes every
// call slower as the table grows, for as long as the connection lives.
func TestHotStatementsUsePrimaryKeyFromEmpty(t *testing.T) {
	t.Parallel()
	conn := pgtest.Connect(t, pgtest.NewDB(t))
	ctx := context.Background()
	_, err := conn.Exec(ctx, "SET plan_cache_mode = force_generic_plan")
	require.NoError(t, err)

	statements := map[string]struct {
		sql   string
		types string
		args  string
	}{
		"load":           {loadRowSQL, "text, text", "'t', 'k'"},
		"takeover":       {takeoverSQL, "text, text, text, interval, text, integer, interval", "'t', 'k', 'o', '1 minute', 'h', 1, '1 day'"},
		"complete":       {completeSQL, "text, text, text, integer, jsonb", "'t', 'k', 'o', 1, '{}'"},
		"complete_in_tx": {completeInTxSQL, "text, text, text, integer, jsonb", "'t', 'k', 'o', 1, '{}'"},
		"fail":           {failSQL, "text, text, text, integer, jsonb", "'t', 'k', 'o', 1, '{}'"},
	}
	for name, st := range statements {
		_, err := conn.Exec(ctx, fmt.Sprintf("PREPARE %s (%s) AS %s", name, st.types, st.sql))
		require.NoError(t, err, name)
		rows, err := conn.Query(ctx, fmt.Sprintf("EXPLAIN EXECUTE %s (%s)", name, st.args))
		require.NoError(t, err, name)
		var plan []string
		for rows.Next() {
			var line string
			require.NoError(t, rows.Scan(&line))
			plan = append(plan, line)
		}
		require.NoError(t, rows.Err())
		assert.Contains(t, strings.Join(plan, "\n"), "Index Cond: ((tenant = $1) AND (key = $2))", "plan of %s", name)
	}
}
