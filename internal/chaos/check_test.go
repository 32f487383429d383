package chaos

import (
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestCompareCountsDuplicatesLossesAndWrongAmounts(t *testing.T) {
	var c Counts
	c.compare("refund", "pay_a", 1, tally{n: 1, sum: 2500}, 2500)
	assert.Empty(t, c.violations, "once, with the planned amount")
	c.compare("refund", "pay_b", 1, tally{n: 2, sum: 5000}, 2500)
	c.compare("credit", "o-c", 1, tally{}, 3000)
	c.compare("credit", "o-d", 0, tally{n: 1, sum: 3000}, 3000)
	c.compare("credit", "o-e", 1, tally{n: 1, sum: 2999}, 3000)
	assert.Equal(t, 2, c.Duplicates, "a second refund, and a credit that was rejected")
	assert.Equal(t, 1, c.Lost)
	assert.Equal(t, 3, c.Effects, "the effects that landed as they should: pay_a, one of pay_b's, o-e")
	require.Len(t, c.violations, 4)
	assert.Contains(t, c.violations[0], "refund for pay_b: 2, want 1")
	assert.Contains(t, c.violations[1], "credit for o-c: none")
	assert.Contains(t, c.violations[3], "amount 2999, want 3000")
}

func TestConfigNamesWhatIsWrong(t *testing.T) {
	cfg := Full()
	cfg.Binary, cfg.DatabaseURL, cfg.Dir = "oncerun", "postgres://x", "/tmp/x"
	cfg.RestartCommand = []string{"true"}
	require.NoError(t, cfg.validate())

	cfg.CrashWorkers = cfg.Workers
	cfg.FaultRate = 1.5
	cfg.PGRestart = "reboot"
	err := cfg.validate()
	require.Error(t, err)
	assert.ErrorContains(t, err, "--crash-workers 4: want 0 to 3")
	assert.ErrorContains(t, err, "--fault-rate 1.5")
	assert.ErrorContains(t, err, `--pg-restart "reboot"`)
}

func TestPlansAskForApprovalAboveTheThreshold(t *testing.T) {
	ps := plans("t", 6, rand.New(rand.NewPCG(1, 2)))
	require.Len(t, ps, 6)
	assert.True(t, ps[0].needsApproval(stepCredit))
	assert.False(t, ps[1].needsApproval(stepCredit))
	assert.True(t, ps[3].needsApproval(stepRefund))
	assert.False(t, ps[4].needsApproval(stepRefund))
	assert.False(t, ps[0].needsApproval(stepNote))
	assert.Len(t, ps[0].calls(), 3)
}

func TestCrashPointsAreReadFromTheWorkersLogs(t *testing.T) {
	log := filepath.Join(t.TempDir(), "worker-0.log")
	require.NoError(t, os.WriteFile(log, []byte(strings.Join([]string{
		`{"level":"warn","msg":"fault injection on: this worker will kill itself","point":"after-commit"}`,
		`{"level":"warn","msg":"fault injection: killing this worker after the step committed","point":"after-commit"}`,
		`{"level":"warn","msg":"fault injection: killing this worker during the effect","point":"during-effect"}`,
		`{"level":"warn","msg":"fault injection: killing this worker after the step committed","point":"after-commit"}`,
		`not json at all`,
	}, "\n")), 0o644))
	h := &harness{workers: []*supervised{{proc: &proc{logPath: log}}, {proc: &proc{logPath: log + ".missing"}}}}
	assert.Equal(t, map[string]int{"after-commit": 2, "during-effect": 1}, h.crashPoints())
}
