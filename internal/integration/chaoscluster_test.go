package integration

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/oncerun/oncerun/internal/chaos"
)

// TestChaosTemporalCluster runs `oncerun-dev chaos --short --temporal cluster`:
// Temporal as two nodes whose state is in PostgreSQL, behind the harness's
// load balancer, each node SIGKILLed in turn and kept down while runs and
// approvals go on against the other, besides the worker kills, the cut
// PostgreSQL connections and the provider and mail faults of
// TestChaosShort. Every run must end and every effect land once, counted
// where it landed. A user's TEMPORAL_ variables must not reach the
// harness's processes: the test exports some that would break them.
func TestChaosTemporalCluster(t *testing.T) {
	t.Parallel()
	rep := runChaos(t, []string{"--short", "--temporal", "cluster"},
		"TEMPORAL_API_KEY=not-for-these-servers", "TEMPORAL_TLS=true", "TEMPORAL_PROFILE=elsewhere")
	short := chaos.ShortCluster()
	assert.Empty(t, rep.Violations)
	assert.Equal(t, chaos.TemporalCluster, rep.Temporal)
	assert.Equal(t, short.Runs, rep.Runs)
	assert.Equal(t, short.Runs, rep.Ended, "every run ended")
	assert.Zero(t, rep.Duplicates)
	assert.Zero(t, rep.Lost)
	assert.Zero(t, rep.Drift)
	assert.Zero(t, rep.InFlightKeys)
	// The nodes died and came back, each in turn, and both served clients.
	assert.Equal(t, short.TemporalRestarts, rep.NodeKills, "node kills")
	assert.Equal(t, short.TemporalRestarts, rep.NodeRestarts, "node restarts")
	assert.Zero(t, rep.TemporalKills, "the cluster as a whole never went down")
	require.Len(t, rep.NodeConnections, 2)
	assert.Positive(t, rep.NodeConnections[0])
	assert.Positive(t, rep.NodeConnections[1])
	// Shards moved: the 4 taken at the start, those of the first node
	// killed, taken back when it returned, and those of the second.
	assert.GreaterOrEqual(t, rep.ShardAcquisitions, 8, "history shard acquisitions")
	assert.GreaterOrEqual(t, rep.WorkerKills, short.Kills/2, "workers killed")
	assert.Equal(t, short.PGRestarts, rep.PGRestarts)
	assert.GreaterOrEqual(t, rep.Effects, short.Runs)
	assert.Positive(t, rep.Mails)
}
