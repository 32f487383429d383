package activities

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"
	"go.temporal.io/sdk/temporal"
	"go.uber.org/zap"

	"github.com/oncerun/oncerun/internal/idempotency"
	"github.com/oncerun/oncerun/internal/keys"
	"github.com/oncerun/oncerun/internal/planner"
	"github.com/oncerun/oncerun/internal/telemetry"
	"github.com/oncerun/oncerun/tools"
)

// FollowUpMessage is a follow-on message a step's effect committed, for the
// run to deliver.
type FollowUpMessage struct {
	Seq  int    `json:"seq"`
	Tool string `json:"tool"`
	// Key is the delivery's idempotency key (see keys.FollowOn).
	Key string `json:"key"`
}

// outboxWriter is a natural or keyed tool's Call.Outbox: it writes
// messages in the effect's transaction.
type outboxWriter struct {
	tx    pgx.Tx
	step  keys.Key
	tools *tools.Registry
	added []FollowUpMessage
}

const insertOutboxSQL = `
INSERT INTO outbox (tenant, run_id, step, seq, key, tool, args, args_hash)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8)`

// Add checks the call like any planned call (an external tool, arguments
// its schema accepts) and writes it to the outbox in the transaction.
func (w *outboxWriter) Add(ctx context.Context, tool string, args any) error {
	t, ok := w.tools.Lookup(tool)
	if !ok || t.Class != tools.ClassExternal {
		return fmt.Errorf("outbox: %q is not a registered external tool: %w", tool, tools.ErrInvalidCall)
	}
	raw, err := json.Marshal(args)
	if err != nil {
		return fmt.Errorf("outbox: encode the arguments of %s: %w: %w", tool, err, tools.ErrInvalidCall)
	}
	p, err := w.tools.Prepare(planner.Call{Tool: tool, Args: raw})
	if err != nil {
		return fmt.Errorf("outbox: %w", err)
	}
	seq := len(w.added) + 1
	key, err := keys.FollowOn(w.step, seq, tool)
	if err != nil {
		return fmt.Errorf("outbox: %w", err)
	}
	_, err = w.tx.Exec(ctx, insertOutboxSQL, w.step.Tenant, w.step.RunID, w.step.Step, seq, key.String(), tool, p.Args, p.ArgsHash)
	if err != nil {
		return fmt.Errorf("outbox: write message %d of %s: %w", seq, w.step, err)
	}
	w.added = append(w.added, FollowUpMessage{Seq: seq, Tool: tool, Key: key.String()})
	return nil
}

// committedFollowUps reads the follow-on messages a step's effect committed,
// for a replayed step whose messages were written by an earlier attempt.
func (a *Activities) committedFollowUps(ctx context.Context, step keys.Key) ([]FollowUpMessage, error) {
	rows, err := a.Pool.Query(ctx, `SELECT seq, tool, key FROM outbox WHERE tenant = $1 AND run_id = $2 AND step = $3 ORDER BY seq`,
		step.Tenant, step.RunID, step.Step)
	if err != nil {
		return nil, fmt.Errorf("read the follow-on messages of %s: %w", step, err)
	}
	msgs, err := pgx.CollectRows(rows, pgx.RowToStructByPos[FollowUpMessage])
	if err != nil {
		return nil, fmt.Errorf("read the follow-on messages of %s: %w", step, err)
	}
	return msgs, nil
}

// DeliverInput names a follow-on message to deliver.
type DeliverInput struct {
	Tenant string `json:"tenant"`
	RunID  string `json:"run_id"`
	Step   int64  `json:"step"`
	Seq    int    `json:"seq"`
}

// DeliverOutput says where a delivery stands.
type DeliverOutput struct {
	Key string `json:"key"`
	// State is delivered, unknown (the receiver may have the message; it is
	// not resent) or failed (refused for good).
	State  string          `json:"state"`
	Result json.RawMessage `json:"result,omitempty"`
	Error  string          `json:"error,omitempty"`
	// Replayed is true when an earlier attempt had delivered it.
	Replayed bool `json:"replayed,omitempty"`
}

// Delivery states of an outbox message.
const (
	DeliveryDelivered = "delivered"
	DeliveryUnknown   = "unknown"
	DeliveryFailed    = "failed"
)

// Deliver delivers one follow-on message as an external effect under its
// own key, with the lease, the error classification and the unknown-outcome
// handling of any external call, and records where it stands on the outbox
// row. An unknown outcome that cannot be resolved is not resent: the
// message is marked unknown and reconciliation reports it. Errors that may
// pass (the receiver is away) are returned for Temporal to retry.
func (a *Activities) Deliver(ctx context.Context, in DeliverInput) (res DeliverOutput, err error) {
	defer keepAlive(ctx)()
	ctx, span := telemetry.Tracer().Start(ctx, "oncerun.deliver", trace.WithAttributes(attrTenant.String(in.Tenant),
		attrRunID.String(in.RunID), attrStep.Int64(in.Step), attribute.Int("oncerun.seq", in.Seq)))
	defer func() {
		if span.IsRecording() {
			span.SetAttributes(attrKey.String(res.Key), attribute.String("oncerun.delivery", string(res.State)),
				attribute.Bool("oncerun.replayed", res.Replayed))
		}
		endCall(span, "oncerun.delivered", err, res.State == DeliveryDelivered)
	}()
	var (
		keyStr, toolName, argsHash string
		args                       json.RawMessage
	)
	err = a.Pool.QueryRow(ctx, `SELECT key, tool, args, args_hash FROM outbox WHERE tenant = $1 AND run_id = $2 AND step = $3 AND seq = $4`,
		in.Tenant, in.RunID, in.Step, in.Seq).Scan(&keyStr, &toolName, &args, &argsHash)
	if errors.Is(err, pgx.ErrNoRows) {
		return DeliverOutput{}, temporal.NewNonRetryableApplicationError(
			fmt.Sprintf("step %d of run %s has no follow-on message %d", in.Step, in.RunID, in.Seq), ErrTypeInvalidArgs, nil)
	}
	if err != nil {
		return DeliverOutput{}, fmt.Errorf("read follow-on message %d of step %d: %w", in.Seq, in.Step, err)
	}
	key, err := keys.Parse(keyStr)
	if err != nil {
		return DeliverOutput{}, temporalError(err)
	}
	log := a.log(ctx).With(callFields(key, zap.Int("seq", in.Seq))...)
	tool, ok := a.Tools.Lookup(toolName)
	if !ok {
		return DeliverOutput{}, temporal.NewNonRetryableApplicationError(
			fmt.Sprintf("follow-on message %s: tool %q is not registered on this worker", keyStr, toolName), ErrTypeUnknownTool, nil)
	}
	call := tools.Call{Key: key, Args: args, ArgsHash: argsHash, DB: a.Pool}
	claim := idempotency.Claim{Key: key, ArgsHash: argsHash, Retention: tool.Retention}
	out, err := a.runExternal(ctx, tool, claim, call, nil)
	res = DeliverOutput{Key: keyStr, State: DeliveryDelivered, Result: out.Result, Replayed: out.Replayed}
	var app *temporal.ApplicationError
	switch {
	case err == nil:
	case errors.As(err, &app) && app.Type() == ErrTypeNeedsResolution:
		res.State, res.Error = DeliveryUnknown, app.Message()
	case errors.As(err, &app) && app.NonRetryable():
		res.State, res.Error = DeliveryFailed, app.Message()
	default:
		log.Warn("follow-on delivery failed; retrying", zap.Error(err))
		return DeliverOutput{}, temporalError(err)
	}
	_, err = a.Pool.Exec(ctx, `
UPDATE outbox SET state = $5, result = $6, detail = $7,
    delivered_at = CASE WHEN $5 = 'delivered' THEN coalesce(delivered_at, statement_timestamp()) END
WHERE tenant = $1 AND run_id = $2 AND step = $3 AND seq = $4`,
		in.Tenant, in.RunID, in.Step, in.Seq, res.State, res.Result, res.Error)
	if err != nil {
		return DeliverOutput{}, fmt.Errorf("record the delivery of %s: %w", keyStr, err)
	}
	log.Info("follow-on message", zap.String("state", res.State), zap.Bool("replayed", res.Replayed), zap.String("error", res.Error))
	return res, nil
}
