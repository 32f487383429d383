package worker_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/oncerun/oncerun/internal/settings"
	"github.com/oncerun/oncerun/worker"
)

// deadlineWarningsEnv is an environment where only
// APPROVAL_DEADLINE_WARNINGS may be set.
func deadlineWarningsEnv(value string) func(string) string {
	return func(name string) string {
		if name == settings.EnvApprovalDeadlineWarnings {
			return value
		}
		return ""
	}
}

func TestApprovalDeadlineWarningsFromEnv(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		value string
		want  []time.Duration
	}{
		{"unset leaves the default to the activities", "", nil},
		{"a list, in the order given", "24h,1h", []time.Duration{24 * time.Hour, time.Hour}},
		{"spaces around items", " 48h , 90m ", []time.Duration{48 * time.Hour, 90 * time.Minute}},
		{"none warns never", "none", []time.Duration{}},
		{"none in capitals", "NONE", []time.Duration{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			cfg, _, err := worker.ConfigFromEnv(deadlineWarningsEnv(tc.value))
			require.NoError(t, err)
			assert.Equal(t, tc.want, cfg.ApprovalDeadlineWarnings)
			// Nil and empty differ: the default, or no warnings at all.
			assert.Equal(t, tc.want == nil, cfg.ApprovalDeadlineWarnings == nil)
		})
	}
}

func TestApprovalDeadlineWarningsFromEnvNamesTheBadValue(t *testing.T) {
	t.Parallel()
	for value, bad := range map[string]string{
		"soon":          `"soon"`,
		"24h,-1h":       `"-1h"`,
		"0s":            `"0s"`,
		"24h,,1h":       `""`,
		"24h,":          `""`,
		"none,1h":       `"none"`,
		"24 hours, 1 h": `"24 hours"`,
	} {
		_, _, err := worker.ConfigFromEnv(deadlineWarningsEnv(value))
		require.Error(t, err, value)
		assert.ErrorContains(t, err, settings.EnvApprovalDeadlineWarnings, value)
		assert.ErrorContains(t, err, bad+" is not a positive duration", value)
	}
}
