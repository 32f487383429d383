package activities

import (
	"context"
	"encoding/json"

	"go.uber.org/zap"

	"github.com/oncerun/oncerun/internal/approvalstore"
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

// EditRefusal says that a run refused the edit of record of a step.
type EditRefusal struct {
	Tenant         string `json:"tenant"`
	RunID          string `json:"run_id"`
	Step           int64  `json:"step"`
	EditedArgsHash string `json:"edited_args_hash"`
	Why            string `json:"why"`
}

// RecordEditRefused takes an edit the run refused off the step's decision
// of record (approvalstore.RecordEditRefused), so that the step, which
// stays pending, is listed again and can be decided anew.
func (a *Activities) RecordEditRefused(ctx context.Context, in EditRefusal) error {
	found, err := approvalstore.RecordEditRefused(ctx, a.Pool, in.Tenant, in.RunID, in.Step, in.EditedArgsHash, in.Why)
	if err != nil {
		return dataError(err)
	}
	if !found {
		a.log(ctx).Warn("the edit the run refused is not the step's decision of record",
			zap.String("tenant", in.Tenant), zap.String("run_id", in.RunID), zap.Int64("step", in.Step),
			zap.String("edited_args_hash", in.EditedArgsHash))
	}
	return nil
}
