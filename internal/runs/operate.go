package runs

import (
	"cmp"
	"context"
	"errors"
	"fmt"

	"go.temporal.io/api/serviceerror"

	"github.com/oncerun/oncerun/internal/approvalstore"
	"github.com/oncerun/oncerun/internal/keys"
	"github.com/oncerun/oncerun/internal/untrusted"
	"github.com/oncerun/oncerun/workflows"
)

// ControlRequest is a cancel, pause, resume or message for a run, as it
// came.
type ControlRequest struct {
	Tenant string
	RunID  string
	// Action is approvalstore.ActionCancel, ActionPause, ActionResume or
	// ActionMessage.
	Action string
	// By names who asks: a token's name, or the CLI's user.
	By string
	// Reason is why, for a cancel, a pause or a resume.
	Reason string
	// MessageID and Text are a message's.
	MessageID string
	Text      string
	// Forbidden, when set, is why the sender may not send the request (a
	// viewer's or an approver's role): it is recorded as forbidden and
	// refused with it, and nothing reaches the run.
	Forbidden error
	// Invalid, when set, is what the caller found wrong with the request
	// (a body that does not decode): it is recorded as invalid and
	// refused with it, and nothing reaches the run.
	Invalid error
}

// Controlled is what became of a control request the run took.
type Controlled struct {
	// Status is the run's status after a cancel, a pause or a resume; a
	// cancelled run's carries its receipt.
	Status workflows.Status
	// Receipt answers a message.
	Receipt workflows.MessageReceipt
	// Repeated says the run was already as asked (cancelled, paused, not
	// paused, or it had accepted the message before): nothing changed.
	Repeated bool
	// Withdrawn counts the pending approvals a cancel withdrew in the
	// approvals table.
	Withdrawn int64
	// Unrecorded is what could not be written to PostgreSQL (the audit
	// row, the withdrawal of the approvals). The run took the request
	// regardless; the caller logs it.
	Unrecorded error
}

// Operate is the one way a request to a run reaches it, whoever sends it
// (the approvals service's API and inbox, the CLI without it): it checks
// who sends it and the request's values (a cancel must say why), sends it
// to the run as its update (see [Client.Cancel], [Client.Pause],
// [Client.Resume], [Client.Message]), and then, for a cancel the run took,
// withdraws in the approvals table the approvals the run withdrew, so that
// a decision sent after is refused at once.
//
// Every request on a run of the tenant leaves one audit row in db
// ([approvalstore.RecordControl]), whatever became of it, a forbidden one
// included; a request naming a run the tenant does not have leaves none,
// so that nobody can fill the table with made-up ids (a request refused
// before it reaches the run asks Temporal whether the run exists; when
// Temporal cannot tell, the row is written). A row that cannot be written
// is reported in Controlled.Unrecorded, which is also returned with an
// error.
//
// Errors, in the order of the checks: an unknown run [ErrNotFound]; a
// sender who may not [ErrForbidden]; a malformed request wraps
// [ErrInvalidRequest], naming the field; a request the run refused
// [ErrRefused] (a *ClosedError for a run that has ended); anything else
// is a run that could not be reached. Each question to Temporal has
// SignalTimeout; the rows are written within ctx.
func (c *Client) Operate(ctx context.Context, db approvalstore.DB, r ControlRequest) (Controlled, error) {
	res, err := c.operate(ctx, r)
	if errors.Is(err, ErrNotFound) {
		return res, err
	}
	row := approvalstore.Control{Tenant: r.Tenant, RunID: r.RunID, Action: r.Action, Actor: r.By, Reason: r.Reason,
		MessageID: r.MessageID, Outcome: outcomeOf(err, res.Repeated)}
	if err != nil {
		row.Detail = err.Error()
	}
	if err == nil && r.Action == approvalstore.ActionCancel {
		n, werr := withdraw(ctx, db, r.Tenant, r.RunID, res.Status)
		res.Withdrawn, res.Unrecorded = n, werr
		if n > 0 {
			row.Detail = WithdrawnText(n)
		}
	}
	if aerr := approvalstore.RecordControl(ctx, db, row); aerr != nil {
		res.Unrecorded = errors.Join(res.Unrecorded, aerr)
	}
	return res, err
}

// operate checks r and sends it to the run.
func (c *Client) operate(ctx context.Context, r ControlRequest) (Controlled, error) {
	if _, err := keys.New(r.Tenant, r.RunID, 1, "x"); err != nil {
		// No run of the tenant can have this id.
		return Controlled{}, fmt.Errorf("run %q of tenant %s: %w", untrusted.Cut(r.RunID, keys.MaxRunIDLen), r.Tenant, ErrNotFound)
	}
	if err := r.check(); err != nil {
		// Refused whatever the run's state; but only a run that exists
		// has its row.
		if c.unknown(ctx, r.Tenant, r.RunID) {
			return Controlled{}, fmt.Errorf("run %s of tenant %s: %w", r.RunID, r.Tenant, ErrNotFound)
		}
		return Controlled{}, err
	}
	if r.Action == approvalstore.ActionMessage {
		tctx, cancel := c.temporalContext(ctx)
		defer cancel()
		rc, err := c.Message(tctx, r.Tenant, r.RunID, workflows.Message{MessageID: r.MessageID, Text: r.Text, By: r.By})
		return Controlled{Receipt: rc, Repeated: rc.Duplicate}, err
	}
	send := map[string]func(context.Context, string, string, workflows.Control) (workflows.Status, error){
		approvalstore.ActionCancel: c.Cancel, approvalstore.ActionPause: c.Pause, approvalstore.ActionResume: c.Resume,
	}[r.Action]
	ctl := workflows.Control{By: r.By, Reason: r.Reason}
	// The run's answer does not say whether it changed: its status before
	// does. Two requests at once may both read as accepted.
	qctx, cancel := c.temporalContext(ctx)
	before, err := c.query(qctx, r.Tenant, r.RunID)
	cancel()
	if err != nil {
		return Controlled{}, err
	}
	tctx, cancel := c.temporalContext(ctx)
	defer cancel()
	st, err := send(tctx, r.Tenant, r.RunID, ctl)
	if err != nil {
		return Controlled{}, err
	}
	return Controlled{Status: st, Repeated: already(r.Action, before)}, nil
}

// check is what refuses r whatever the run's state, in this order: a
// sender who may not send it, then its values (a cancel must say why).
func (r ControlRequest) check() error {
	switch {
	case r.Forbidden != nil:
		return fmt.Errorf("%w: %w", ErrForbidden, r.Forbidden)
	case r.Invalid != nil:
		return fmt.Errorf("%w: %w", ErrInvalidRequest, r.Invalid)
	}
	var err error
	ctl := workflows.Control{By: r.By, Reason: r.Reason}
	switch r.Action {
	case approvalstore.ActionMessage:
		err = workflows.Message{MessageID: r.MessageID, Text: r.Text, By: r.By}.Validate()
	case approvalstore.ActionCancel:
		err = ctl.ValidateCancel()
	case approvalstore.ActionPause, approvalstore.ActionResume:
		err = ctl.Validate()
	default:
		err = fmt.Errorf("action %q is not cancel, pause, resume or message", untrusted.Cut(r.Action, 32))
	}
	if err != nil {
		return fmt.Errorf("%w: %w", ErrInvalidRequest, err)
	}
	return nil
}

// unknown reports whether Temporal does not know the tenant's run; false
// when it could not be asked.
func (c *Client) unknown(ctx context.Context, tenant, runID string) bool {
	qctx, cancel := c.temporalContext(ctx)
	defer cancel()
	_, err := c.Temporal.DescribeWorkflowExecution(qctx, workflows.WorkflowID(tenant, runID), "")
	var nf *serviceerror.NotFound
	return errors.As(err, &nf)
}

// already reports whether a run whose status was st is already as the
// action asks.
func already(action string, st workflows.Status) bool {
	switch action {
	case approvalstore.ActionCancel:
		return st.Cancel != nil
	case approvalstore.ActionPause:
		return st.Paused != nil
	case approvalstore.ActionResume:
		return st.Paused == nil
	}
	return false
}

// withdraw marks withdrawn, in the approvals table, the approvals a
// cancelled run withdrew: its steps cancelled while they waited for a
// decision. A step decided before the cancel is left to the run to record.
func withdraw(ctx context.Context, db approvalstore.DB, tenant, runID string, st workflows.Status) (int64, error) {
	if st.Cancel == nil {
		return 0, nil
	}
	var steps, asked []int64
	for _, s := range st.Steps {
		if s.State == workflows.StepCancelled && s.Approval != nil && s.Approval.Decision == "" {
			steps = append(steps, s.Step)
		}
		if n := len(s.Questions); s.State == workflows.StepCancelled && n > 0 && s.Questions[n-1].State != workflows.QuestionAnswered {
			asked = append(asked, s.Step)
		}
	}
	// The questions the run withdrew can no longer be answered either.
	if err := approvalstore.WithdrawQuestions(ctx, db, tenant, runID, asked, st.Cancel.By, st.Cancel.At, st.Cancel.Reason); err != nil {
		return 0, err
	}
	return approvalstore.WithdrawRun(ctx, db, tenant, runID, steps, st.Cancel.By, st.Cancel.At, st.Cancel.Reason)
}

// outcomeOf is the audit row's outcome of a request that ended with err.
func outcomeOf(err error, repeated bool) string {
	switch {
	case err == nil && repeated:
		return approvalstore.ControlRepeated
	case err == nil:
		return approvalstore.ControlAccepted
	case errors.Is(err, ErrForbidden):
		return approvalstore.ControlForbidden
	case errors.Is(err, ErrInvalidRequest):
		return approvalstore.ControlInvalid
	case errors.Is(err, ErrRefused):
		return approvalstore.ControlRefused
	}
	return approvalstore.ControlUnavailable
}

// WithdrawnText says how many pending approvals a cancel withdrew, in words:
// "1 pending approval withdrawn", "2 pending approvals withdrawn".
func WithdrawnText(n int64) string {
	if n == 1 {
		return "1 pending approval withdrawn"
	}
	return fmt.Sprintf("%d pending approvals withdrawn", n)
}

// temporalContext bounds one question to Temporal by SignalTimeout.
func (c *Client) temporalContext(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, cmp.Or(c.SignalTimeout, DefaultSignalTimeout))
}
