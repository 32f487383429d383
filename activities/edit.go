package activities

import (
	"context"
	"encoding/json"
)

// EditCheck asks whether an approver's edit of a pending step may run: the
// step's tool, its proposed arguments and the edited ones.
type EditCheck struct {
	Tool   string          `json:"tool"`
	Args   json.RawMessage `json:"args"`
	Edited json.RawMessage `json:"edited"`
}

// EditChecked is the answer: the edited arguments in canonical JSON and
// their hash, or why the edit is refused.
type EditChecked struct {
	Args     json.RawMessage `json:"args,omitempty"`
	ArgsHash string          `json:"args_hash,omitempty"`
	Refused  string          `json:"refused,omitempty"`
}

// CheckEdit checks an edit against the worker's registry
// (tools.Registry.PrepareEdit: the tool's schema and edit rule). A refusal
// is an answer, not an error, so that the run records it and the step stays
// pending. The run calls it as a local activity: its answer is recorded in
// the run's history, so a replay never asks a registry that has changed.
func (a *Activities) CheckEdit(_ context.Context, in EditCheck) (EditChecked, error) {
	p, err := a.Tools.PrepareEdit(in.Tool, in.Args, in.Edited)
	if err != nil {
		return EditChecked{Refused: err.Error()}, nil
	}
	return EditChecked{Args: p.Args, ArgsHash: p.ArgsHash}, nil
}
