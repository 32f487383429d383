package cli

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/oncerun/oncerun/internal/settings"
	"github.com/oncerun/oncerun/tools"
	"github.com/oncerun/oncerun/worker"
)

// TestStartChecksPlansAgainstTheDeploymentsRegistry checks that `start`
// checks a plan against the registry the deployment's workers build: a
// tool added through Env.Configure is accepted, the environment's approval
// threshold applies, and a tool nobody registered is refused by name.
func TestStartChecksPlansAgainstTheDeploymentsRegistry(t *testing.T) {
	t.Parallel()
	own := tools.Tool{
		Name: "award_points", Class: tools.ClassRead,
		Schema: json.RawMessage(`{"type":"object","properties":{"points":{"type":"integer"}},"required":["points"]}`),
		Run:    func(context.Context, tools.Call) (any, error) { return nil, nil },
	}
	env := Env{Configure: func(c *worker.Config) { c.Tools = append(c.Tools, own) }}
	reg, err := env.Registry()
	require.NoError(t, err)
	path := filepath.Join(t.TempDir(), "plan.json")
	require.NoError(t, os.WriteFile(path, []byte(`{"steps":[{"tool":"award_points","args":{"points":5}}]}`), 0o600))
	calls, err := ReadPlan(path, reg)
	require.NoError(t, err)
	assert.Equal(t, "award_points", calls[0].Tool)

	builtin, err := Env{}.Registry()
	require.NoError(t, err)
	_, err = ReadPlan(path, builtin)
	assert.ErrorContains(t, err, `unknown tool "award_points"`)

	// The environment the workers read is the one the check reads.
	strict := Env{Getenv: func(k string) string {
		if k == settings.EnvCreditThreshold {
			return "100"
		}
		return ""
	}}
	reg, err = strict.Registry()
	require.NoError(t, err)
	p, err := reg.Prepare(tools.ProposedCall{Tool: "issue_credit",
		Args: json.RawMessage(`{"order_id":"1","reason":"late","amount_cents":500,"currency":"EUR"}`)})
	require.NoError(t, err)
	assert.True(t, p.NeedsApproval, "a 5.00 credit needs approval above a threshold of 1.00")
}
