package planner

import (
	"context"
	"slices"
)

// Script is the planner that follows the run's plan: on each turn it returns
// the calls of Request.Plan not yet proposed, and Done once every call was
// proposed.
type Script struct{}

// Next returns the plan's calls from position req.Proposed on, in order.
// A run sends only the calls it will make this turn (one, or a batch).
func (Script) Next(_ context.Context, req Request) (Proposal, error) {
	if req.Proposed >= len(req.Plan) {
		return Proposal{Done: true, Message: "every call of the plan was made"}, nil
	}
	return Proposal{Calls: slices.Clone(req.Plan[req.Proposed:])}, nil
}
