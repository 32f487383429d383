package main

import (
	"cmp"
	"context"
	"io"
	"os"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestEveryImplementationInsertsItsNotes runs a round of the benchmark, one
// run of two steps per implementation after the warm-up's four, on a
// Temporal server on SQLite, and counts each implementation's notes in its
// table: one per step of every run it made.
func TestEveryImplementationInsertsItsNotes(t *testing.T) {
	if testing.Short() {
		t.Skip("builds oncerun-dev and starts a Temporal server")
	}
	ctx := context.Background()
	bin, err := buildOncerunDev(ctx, t.TempDir(), io.Discard)
	require.NoError(t, err)
	cfg := config{
		rounds: 1, runs: []int{1}, minRuns: 1, steps: 2, temporal: []string{temporalSQLite}, impls: allImpls, poolSize: 2,
		databaseURL: cmp.Or(os.Getenv("DATABASE_URL"), defaultDatabaseURL), oncerunDev: bin, dir: t.TempDir(), progress: io.Discard,
	}
	halves, tallies, err := runSection(ctx, cfg, temporalSQLite)
	require.NoError(t, err)

	require.Len(t, halves, len(allImpls))
	for _, impl := range allImpls {
		require.Equal(t, tally{Made: 5, Notes: 10}, tallies[impl], impl)
	}
	for _, h := range halves {
		require.Equal(t, 2, h.Steps, h.Impl)
		require.Positive(t, h.Wall, h.Impl)
	}
}

func TestBackendsAreCountedByDatabase(t *testing.T) {
	t.Parallel()
	dbs := []string{"peers_1_sqlite_oncerun"}
	for _, tc := range []struct {
		title         string
		backend, ours bool
	}{
		{"postgres: 15/main: postgres peers_1_sqlite_oncerun 127.0.0.1(53412) idle", true, true},
		{"postgres: postgres peers_1_sqlite_oncerun [local] idle", true, true},
		{"postgres: 15/main: postgres peers_1_sqlite_oncerun_x 127.0.0.1(53413) idle", true, false},
		{"postgres: 15/main: postgres test 127.0.0.1(53414) INSERT", true, false},
		{"postgres: 15/main: walwriter", false, false},
		{"/usr/lib/postgresql/15/bin/postgres -D /var/lib/postgresql/15/main -c config_file=/etc/postgresql/15/main/postgresql.conf", false, false},
	} {
		require.Equal(t, tc.backend, backendTitle.MatchString(tc.title), tc.title)
		require.Equal(t, tc.ours, namesOneOf(tc.title, dbs), tc.title)
	}
}
