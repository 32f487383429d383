package activities_test

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/oncerun/oncerun/activities"
	"github.com/oncerun/oncerun/internal/agents"
	"github.com/oncerun/oncerun/internal/planner"
	"github.com/oncerun/oncerun/internal/shop"
)

// withAgents gives f's activities the sub-agents of cfg and a planner,
// "propose", that proposes calls and records the tools it was shown.
func (f fixture) withAgents(t *testing.T, cfg agents.Config, calls []planner.Call, shown *[]string) {
	t.Helper()
	set, err := agents.New(cfg, func(tool string) bool { _, ok := f.acts.Tools.Lookup(tool); return ok })
	require.NoError(t, err)
	f.acts.Agents = set
	f.acts.Planners = map[string]planner.Planner{"propose": planFunc(func(_ context.Context, req planner.Request) (planner.Proposal, error) {
		*shown = (*shown)[:0]
		for _, s := range req.Tools {
			*shown = append(*shown, s.Name)
		}
		return planner.Proposal{Calls: calls}, nil
	})}
}

var subAgents = agents.Config{MaxDepth: 2, Agents: []agents.Agent{
	{Name: "refunds", Description: "credits", Tools: []string{shop.ToolLookupOrder, shop.ToolIssueCredit, "agent_notes"}},
	{Name: "notes", Description: "notes", Tools: []string{shop.ToolAddOrderNote}},
}}

// A run a person started sees every tool and every sub-agent; a call of a
// sub-agent's tool is a delegation that carries the child's grant.
func TestPlanChecksADelegation(t *testing.T) {
	t.Parallel()
	f := setup(t)
	var shown []string
	f.withAgents(t, subAgents, []planner.Call{
		{Tool: "agent_refunds", Args: json.RawMessage(`{"goal":"credit order 1001"}`)},
	}, &shown)
	out, err := f.plan(t, activities.PlanInput{Tenant: "acme", RunID: "r1", Planner: "propose"})
	require.NoError(t, err)
	assert.Subset(t, shown, []string{shop.ToolLookupOrder, shop.ToolIssueCredit, shop.ToolAddOrderNote, "agent_refunds", "agent_notes"})
	require.Len(t, out.Calls, 1)
	c := out.Calls[0]
	require.Empty(t, c.Invalid)
	assert.Equal(t, activities.ClassDelegate, c.Class)
	require.NotNil(t, c.Delegate)
	assert.Equal(t, "refunds", c.Delegate.Agent)
	assert.Equal(t, "credit order 1001", c.Delegate.Goal)
	assert.Equal(t, []string{shop.ToolLookupOrder, shop.ToolIssueCredit, "agent_notes"}, c.Delegate.Grant)
	assert.Equal(t, agents.DefaultMaxChildren, c.Delegate.MaxChildren)
	assert.Len(t, c.ArgsHash, 64)
}

// A child run sees only its grant, a call outside it is refused with the
// reason, its own children get no more than it has, and a delegation past
// the depth bound is refused.
func TestPlanHoldsAChildRunToItsGrant(t *testing.T) {
	t.Parallel()
	f := setup(t)
	var shown []string
	f.withAgents(t, subAgents, []planner.Call{
		{Tool: shop.ToolAddOrderNote, Args: json.RawMessage(`{"order_id":"1001","text":"x"}`)},
		{Tool: "agent_notes", Args: json.RawMessage(`{"goal":"note it"}`)},
	}, &shown)
	grant := []string{shop.ToolLookupOrder, shop.ToolIssueCredit, "agent_notes"}
	out, err := f.plan(t, activities.PlanInput{Tenant: "acme", RunID: "r1.1", Planner: "propose", Granted: true, Grant: grant, Depth: 1})
	require.NoError(t, err)
	assert.ElementsMatch(t, grant, shown, "the planner sees the grant alone")
	require.Len(t, out.Calls, 2)
	assert.Contains(t, out.Calls[0].Invalid, `tool "add_order_note" is not granted to this run`)
	require.NotNil(t, out.Calls[1].Delegate)
	assert.Empty(t, out.Calls[1].Delegate.Grant, "notes' add_order_note is not the parent's to give")

	out, err = f.plan(t, activities.PlanInput{Tenant: "acme", RunID: "r1.1.2", Planner: "propose", Granted: true, Grant: grant, Depth: 2})
	require.NoError(t, err)
	assert.Contains(t, out.Calls[1].Invalid, "agent_notes: a child run here would be at depth 3, past the bound of 2")

	// Granted nothing, a child may use nothing.
	out, err = f.plan(t, activities.PlanInput{Tenant: "acme", RunID: "r1.2", Planner: "propose", Granted: true, Depth: 1})
	require.NoError(t, err)
	assert.Empty(t, shown)
	for _, c := range out.Calls {
		assert.Contains(t, c.Invalid, "is not granted to this run")
	}
}
