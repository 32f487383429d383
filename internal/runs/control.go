package runs

import (
	"context"
	"errors"
	"fmt"

	"go.temporal.io/api/serviceerror"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/temporal"

	"github.com/oncerun/oncerun/workflows"
)

var (
	// ErrRefused means the run refused an operator's request in its state:
	// it has ended, it is cancelled, it is scripted, a message id was used
	// for another text. The error says which.
	ErrRefused = errors.New("refused by the run")
	// ErrInvalidRequest means the request itself is malformed; the error
	// names the field.
	ErrInvalidRequest = errors.New("invalid request")
	// ErrForbidden means the sender's role may not send the request; the
	// error wraps the caller's reason ([ControlRequest.Forbidden]).
	ErrForbidden = errors.New("forbidden")
)

// ClosedError is a run that has ended and so takes no request: State is
// the state it ended in (completed, failed, cancelled), and Status its
// last status when it could be read.
type ClosedError struct {
	RunID  string
	State  workflows.RunState
	Status *workflows.Status
}

func (e *ClosedError) Error() string {
	return fmt.Sprintf("run %s has ended: it is %s", e.RunID, e.State)
}

// Is makes a ClosedError match ErrRefused.
func (e *ClosedError) Is(target error) bool { return target == ErrRefused }

// Cancel cancels the tenant's run (see workflows.UpdateCancel) and returns
// its status with the receipt. A run cancelled before, even one that has
// ended since, answers its status again. A run that ended otherwise is a
// *ClosedError.
func (c *Client) Cancel(ctx context.Context, tenant, runID string, ctl workflows.Control) (workflows.Status, error) {
	st, err := c.control(ctx, tenant, runID, workflows.UpdateCancel, ctl)
	var closed *ClosedError
	if errors.As(err, &closed) && closed.State == workflows.RunCancelled && closed.Status != nil {
		return *closed.Status, nil
	}
	return st, err
}

// Pause pauses the tenant's run, Resume resumes it; each returns the run's
// status. A repeat changes nothing and answers the status again.
func (c *Client) Pause(ctx context.Context, tenant, runID string, ctl workflows.Control) (workflows.Status, error) {
	return c.control(ctx, tenant, runID, workflows.UpdatePause, ctl)
}

// Resume resumes the tenant's paused run (see Pause).
func (c *Client) Resume(ctx context.Context, tenant, runID string, ctl workflows.Control) (workflows.Status, error) {
	return c.control(ctx, tenant, runID, workflows.UpdateResume, ctl)
}

// Message gives the tenant's run a message for its planner's next turn.
// The same message id with the same text answers its first receipt again,
// with Duplicate set.
func (c *Client) Message(ctx context.Context, tenant, runID string, m workflows.Message) (workflows.MessageReceipt, error) {
	var rc workflows.MessageReceipt
	err := c.update(ctx, tenant, runID, workflows.UpdateMessage, m, &rc)
	return rc, err
}

func (c *Client) control(ctx context.Context, tenant, runID, name string, ctl workflows.Control) (workflows.Status, error) {
	var st workflows.Status
	err := c.update(ctx, tenant, runID, name, ctl, &st)
	return st, err
}

// update sends the run an update and waits for its answer. A run that is
// not known is ErrNotFound; one that has ended is a *ClosedError; a
// refusal wraps ErrRefused or ErrInvalidRequest with the run's reason.
func (c *Client) update(ctx context.Context, tenant, runID, name string, arg, out any) error {
	id := workflows.WorkflowID(tenant, runID)
	release, err := slots.acquire(ctx, id)
	if err != nil {
		return fmt.Errorf("%s run %s: wait for the updates sent before: %w", name, runID, err)
	}
	defer release()
	h, err := c.Temporal.UpdateWorkflow(ctx, client.UpdateWorkflowOptions{
		WorkflowID:   id,
		UpdateName:   name,
		Args:         []any{arg},
		WaitForStage: client.WorkflowUpdateStageCompleted,
	})
	if err == nil {
		err = h.Get(ctx, out)
	}
	if err == nil {
		return nil
	}
	var app *temporal.ApplicationError
	if errors.As(err, &app) {
		switch app.Type() {
		case workflows.ErrTypeUpdateInvalid:
			return fmt.Errorf("%w: %s", ErrInvalidRequest, app.Message())
		case workflows.ErrTypeUpdateConflict:
			return fmt.Errorf("%w: %s", ErrRefused, app.Message())
		}
	}
	var nf *serviceerror.NotFound
	if !errors.As(err, &nf) {
		return fmt.Errorf("%s run %s: %w", name, runID, err)
	}
	// Not found: no such run, or a run that has ended.
	open, _, derr := c.RunState(ctx, tenant, runID)
	if derr != nil {
		return fmt.Errorf("%s run %s: %w", name, runID, derr)
	}
	if open {
		return fmt.Errorf("%s run %s: %w", name, runID, err)
	}
	st, serr := c.query(ctx, tenant, runID)
	if errors.Is(serr, ErrNotFound) {
		return fmt.Errorf("run %s of tenant %s: %w", runID, tenant, ErrNotFound)
	}
	closed := &ClosedError{RunID: runID, State: workflows.RunCompleted}
	if serr == nil {
		closed.State, closed.Status = st.State, &st
	}
	return closed
}
