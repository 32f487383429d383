package planner

import (
	"context"
	"slices"
)

// Script is the planner that follows the run's plan: on each turn it returns
// the calls of Request.Plan not yet proposed, and Done once every call was
// proposed.
type Script struct{}

// Next returns the calls the run sent, in order: a run of this release
// sends only the calls it will make this turn (one, or a batch), at
// position 0. A run of a release that sent the whole plan names the
// position of its next call in req.Proposed, and gets that call alone, as
// it did.
func (Script) Next(_ context.Context, req Request) (Proposal, error) {
	if req.Proposed >= len(req.Plan) {
		return Proposal{Done: true, Message: "every call of the plan was made"}, nil
	}
	if req.Proposed > 0 {
		return Proposal{Calls: []Call{req.Plan[req.Proposed]}}, nil
	}
	return Proposal{Calls: slices.Clone(req.Plan)}, nil
}
