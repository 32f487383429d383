package planner

import "context"

// Script is the planner that follows the run's plan: on each turn it returns
// the next call of Request.Plan, and Done once every call was proposed.
type Script struct{}

// Next returns the plan's call at position req.Proposed.
func (Script) Next(_ context.Context, req Request) (Proposal, error) {
	if req.Proposed >= len(req.Plan) {
		return Proposal{Done: true, Message: "every call of the plan was made"}, nil
	}
	return Proposal{Calls: []Call{req.Plan[req.Proposed]}}, nil
}
