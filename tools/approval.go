package tools

import (
	"encoding/json"
	"fmt"
)

type approvalKind int

const (
	approveNever approvalKind = iota
	approveAlways
	approveWhen
)

// ApprovalRule decides whether a call of a tool must wait for a human. Build
// one with [Never], [Always] or [When]; the zero value is Never.
type ApprovalRule struct {
	kind        approvalKind
	description string
	predicate   func(args json.RawMessage) (bool, error)
}

// Never is the rule of tools that run without approval.
func Never() ApprovalRule { return ApprovalRule{} }

// Always is the rule of tools whose every call waits for approval.
func Always() ApprovalRule { return ApprovalRule{kind: approveAlways, description: "always"} }

// When is the rule of tools whose calls wait for approval when predicate
// holds for their canonical arguments. The description says so in words for
// approvers and logs, e.g. "amount_cents above 10000". The predicate must be
// a pure function of the arguments.
func When(description string, predicate func(args json.RawMessage) (bool, error)) ApprovalRule {
	return ApprovalRule{kind: approveWhen, description: description, predicate: predicate}
}

// Needs reports whether a call with args needs approval, and why.
func (r ApprovalRule) Needs(args json.RawMessage) (bool, string, error) {
	switch r.kind {
	case approveAlways:
		return true, "every call needs approval", nil
	case approveWhen:
		if r.predicate == nil {
			return false, "", fmt.Errorf("approval rule %q has no predicate", r.description)
		}
		need, err := r.predicate(args)
		if err != nil || !need {
			return false, "", err
		}
		return true, r.description, nil
	}
	return false, "", nil
}

// String describes the rule.
func (r ApprovalRule) String() string {
	switch r.kind {
	case approveAlways:
		return "always"
	case approveWhen:
		return "when " + r.description
	}
	return "never"
}
