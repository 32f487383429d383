package activities

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"go.temporal.io/sdk/temporal"
	"go.uber.org/zap"

	"github.com/oncerun/oncerun/internal/idempotency"
	"github.com/oncerun/oncerun/internal/keys"
	"github.com/oncerun/oncerun/internal/metrics"
	"github.com/oncerun/oncerun/internal/planner"
	"github.com/oncerun/oncerun/internal/questions"
	"github.com/oncerun/oncerun/internal/spend"
	"github.com/oncerun/oncerun/tools"
)

// leaseMargin is added to a tool's timeout to size its key's lease, so that
// a lease outlives the slowest legitimate attempt.
const leaseMargin = 30 * time.Second

// ToolInput is one step to execute.
type ToolInput struct {
	// Facts are the run's facts it has not written yet (see RunFact):
	// written first, before the step's own work.
	Facts  []RunFact `json:"facts,omitempty"`
	Tenant string    `json:"tenant"`
	RunID  string    `json:"run_id"`
	Step   int64     `json:"step"`
	Tool   string    `json:"tool"`
	// Args are the canonical arguments the step was planned (and, if it
	// needed one, approved) with.
	Args json.RawMessage `json:"args"`
	// ArgsHash is their hash as the workflow recorded it.
	ArgsHash string `json:"args_hash"`
	// Spend, set by a run that waits for approval at a spend limit (see
	// ToolOutput.Parked), counts the step's amounts against the run's
	// budget and the tenant's caps. A run that does not set it (one begun
	// before limits) has its amounts counted, but never parked.
	Spend *SpendInput `json:"spend,omitempty"`
	// Reply, set once a person answered the questions the tool's server
	// asked in an earlier attempt's answer (ToolOutput.Question), is sent
	// back with the call.
	Reply *Reply `json:"reply,omitempty"`
	// Tree, set by a run of a tree whose runs may make the step's intent
	// at the same moment (a child run, or a parent's step in a turn that
	// delegates), is the tree's first run: the step claims its intent
	// there (see idempotency.ClaimIntent), and is a duplicate (ToolOutput.Duplicate)
	// when another step of the tree made it.
	Tree string `json:"tree,omitempty"`
}

// SpendInput is what a step's charge needs of its run.
type SpendInput struct {
	// Budget is the run's budget per currency (limits.spend).
	Budget map[string]int64 `json:"budget,omitempty"`
	// OtherCurrencies is the budget's rule for an amount in a currency it
	// does not name (limits.other_currencies): spend.OtherPark, "" too,
	// or spend.OtherAllow.
	OtherCurrencies string `json:"other_currencies,omitempty"`
	// BudgetRun is the run whose budget counts the step; default the
	// step's own run.
	BudgetRun string `json:"budget_run,omitempty"`
	// Exception is set once an approver let the step past a limit: its
	// amounts count whatever limit they cross.
	Exception bool `json:"exception,omitempty"`
}

// Parked is a step's answer when it would take a spend limit past its
// amount: nothing was done, nothing counted, and the run waits for an
// approver to let it past, edit it down or reject it.
type Parked struct {
	// Reason says which limit, in words: "over the daily cap for
	// issue_credit: 1,950.00 of 2,000.00 EUR spent, this call 120.00".
	Reason string     `json:"reason"`
	Level  SpendLevel `json:"level"`
}

// ToolOutput is a step's result.
type ToolOutput struct {
	// Key is the step's idempotency key; a local activity's output leaves
	// it out.
	Key string `json:"key,omitempty"`
	// Result is the tool's result, as JSON.
	Result json.RawMessage `json:"result"`
	// Replayed is true when the effect had been applied by an earlier attempt
	// and Result was returned from the dedup store.
	Replayed bool `json:"replayed,omitempty"`
	// Resolved is true when an earlier attempt's unknown outcome was found
	// applied by the tool's paired read.
	Resolved bool `json:"resolved,omitempty"`
	// FollowUps are the follow-on messages the effect committed, for the
	// run to deliver.
	FollowUps []FollowUpMessage `json:"follow_ups,omitempty"`
	// Parked is set, and nothing else, when the step would cross a spend
	// limit (only for an input with Spend set).
	Parked *Parked `json:"parked,omitempty"`
	// Question is set, and nothing else, when the tool's server answered
	// that it needs a person's input before it completes the call: it
	// completed nothing, and the run waits for an answer to send back
	// (ToolInput.Reply).
	Question *Question `json:"question,omitempty"`
	// Duplicate is set, and nothing else, when another step of the run's
	// tree made the step's intent (ToolInput.Tree): nothing was done.
	Duplicate *TreeDuplicate `json:"duplicate,omitempty"`
}

// TreeDuplicate is the step of a run tree that made an intent another of
// its steps proposed: its run, step and key, and its result.
type TreeDuplicate struct {
	RunID  string          `json:"run_id"`
	Step   int64           `json:"step"`
	Key    string          `json:"key"`
	Result json.RawMessage `json:"result,omitempty"`
}

// RunTool executes one step under its key, by the tool's effect class:
//
//   - read: the tool runs; no key is written.
//   - natural and keyed: the key is claimed, the tool runs and the key is
//     completed in one transaction; a completed key is replayed.
//   - external: the key is leased first, the tool runs outside the database
//     and the lease is completed with its result. An earlier attempt whose
//     outcome is unknown is resolved by the tool's paired read.
func (a *Activities) RunTool(ctx context.Context, in ToolInput) (ToolOutput, error) {
	defer keepAlive(ctx)()
	if err := a.recordFacts(ctx, in.Tenant, in.Facts); err != nil {
		return ToolOutput{}, err
	}
	key, err := keys.New(in.Tenant, in.RunID, in.Step, in.Tool)
	if err != nil {
		return ToolOutput{}, temporalError(err)
	}
	ctx, span := startStep(ctx, in, key)
	st := &stepTrace{span: span}
	defer st.end()
	log := a.log(ctx).With(callFields(key)...)
	tool, ok := a.Tools.Lookup(in.Tool)
	if !ok {
		if out, made, err := a.madeBefore(ctx, in, key); made || err != nil {
			st.called(a.Metrics, in.Tool, metrics.OutcomeReplayed)
			return out, err
		}
		st.called(a.Metrics, in.Tool, metrics.OutcomeInvalid)
		return ToolOutput{}, toolMissing(ctx, in)
	}
	// Check again what the workflow planned: the worker's schemas may have
	// changed since, and the approval was given for exactly this hash.
	p, err := a.Tools.Prepare(planner.Call{Tool: in.Tool, Args: in.Args})
	if err == nil && p.ArgsHash != in.ArgsHash {
		err = fmt.Errorf("step %d: arguments hash to %s, the step was planned with %s: %w",
			in.Step, p.ArgsHash, in.ArgsHash, tools.ErrInvalidCall)
	}
	if err != nil {
		if out, made, merr := a.madeBefore(ctx, in, key); made || merr != nil {
			st.called(a.Metrics, in.Tool, metrics.OutcomeReplayed)
			return out, merr
		}
		st.called(a.Metrics, in.Tool, metrics.OutcomeInvalid)
		log.Warn("tool call refused", zap.Error(err))
		return ToolOutput{}, temporalError(err)
	}
	call := tools.Call{Key: key, Args: p.Args, ArgsHash: p.ArgsHash}
	if in.Reply != nil {
		ctx = questions.WithReply(ctx, *in.Reply)
	}
	if !tool.Local() && a.Pool != nil {
		// A server that asks a person over its live session is answered
		// through the inbox while this attempt lives.
		ctx = questions.WithLive(ctx, a.askLive(in, key))
		a.loseLiveQuestions(ctx, in, false)
	}
	claim := idempotency.Claim{Key: key, ArgsHash: p.ArgsHash, Retention: tool.Retention, Lease: tool.Timeout + leaseMargin}
	charge, charged, err := chargeOf(in, key, tool, p.Args)
	if err != nil {
		st.called(a.Metrics, in.Tool, metrics.OutcomeInvalid)
		return ToolOutput{}, temporalError(fmt.Errorf("step %d: %w: %w", in.Step, err, tools.ErrInvalidCall))
	}
	charged = charged && tool.Class != tools.ClassRead
	st.class = string(tool.Class)

	var (
		out       idempotency.Outcome
		resolved  bool
		followUps []FollowUpMessage
		// intent is the step's claim on its intent in its run tree, when
		// it is an external step that made one (ToolInput.Tree).
		intent *idempotency.IntentClaim
	)
	outcome := metrics.OutcomeExecuted
	switch tool.Class {
	case tools.ClassRead:
		call.DB = a.Pool
		out.Result, err = runTool(ctx, tool, call)
		if err == nil {
			// No key holds it, but the run's history, its status and the
			// planner do: the same rule as for every result.
			if err = idempotency.CheckResult(out.Result); err != nil {
				err = fmt.Errorf("tool %s: %w", tool.Name, err)
			}
		}
	case tools.ClassNatural, tools.ClassKeyed:
		var (
			outbox *outboxWriter
			got    spend.Counted
		)
		out, err = a.Store.Do(ctx, claim, func(ctx context.Context, tx pgx.Tx) (json.RawMessage, error) {
			// The run tree's claim on the intent commits with the effect.
			if in.Tree != "" {
				if err := idempotency.ClaimIntentTx(ctx, tx, intentOf(in, key, p.ArgsHash)); err != nil {
					return nil, err
				}
			}
			// The amounts count in the effect's own transaction: both
			// commit, or neither.
			if charged {
				var err error
				if got, err = spend.ChargeTx(ctx, tx, charge); err != nil {
					return nil, err
				}
				if got.Over != nil {
					return nil, &spend.OverError{Level: *got.Over}
				}
			}
			outbox = &outboxWriter{tx: tx, step: key, tools: a.Tools}
			call.Tx, call.Outbox = tx, outbox
			return runTool(ctx, tool, call)
		})
		if level, over := overOf(err); over {
			st.outcome = outcomeParked
			return a.parked(ctx, in, level), nil
		}
		if dup, ok := duplicateOf(err); ok {
			st.called(a.Metrics, in.Tool, metrics.OutcomeDuplicate)
			return dup, nil
		}
		switch {
		case err != nil:
		case out.Replayed:
			followUps, err = a.committedFollowUps(ctx, key)
		default:
			followUps = outbox.added
			if charged {
				a.counted(ctx, charge, got, true)
			}
		}
	case tools.ClassExternal:
		call.DB = a.Pool
		if in.Tree != "" {
			// The run tree's claim on the intent, before anything is sent.
			c := intentOf(in, key, p.ArgsHash)
			if err := idempotency.ClaimIntent(ctx, a.Pool, c); err != nil {
				if dup, ok := duplicateOf(err); ok {
					st.called(a.Metrics, in.Tool, metrics.OutcomeDuplicate)
					return dup, nil
				}
				st.called(a.Metrics, in.Tool, failureOutcome(err))
				return ToolOutput{}, temporalError(err)
			}
			intent = &c
		}
		if charged {
			parked, perr := a.reserve(ctx, in, claim, charge)
			if perr != nil || parked != nil {
				a.releaseIntent(ctx, intent)
				if perr != nil {
					return ToolOutput{}, temporalError(perr)
				}
				st.outcome = outcomeParked
				return *parked, nil
			}
		}
		var ext idempotency.ExternalOutcome
		ext, err = a.runExternal(ctx, tool, claim, call, intent)
		if err != nil {
			// Nothing that may have taken effect: another step of the tree
			// may make the intent (an unknown outcome keeps the claim).
			a.releaseIntent(ctx, intent)
		}
		out, resolved = ext.Outcome, ext.Resolved
		if resolved {
			outcome = metrics.OutcomeResolved
		}
		if charged {
			var app *temporal.ApplicationError
			switch {
			case err == nil:
				a.settle(ctx, charge, true)
			case errors.As(err, &app) && app.Type() == ErrTypeNeedsResolution:
				// Held while nobody knows: a person's answer settles it.
			case errors.Is(err, tools.ErrNotApplied), errors.Is(err, idempotency.ErrKeyReuse):
				// Nothing happened: the amount counts no more, and the
				// next attempt reserves again.
				a.release(ctx, claim, charge)
			}
		}

	default:
		err = fmt.Errorf("tool %s has unknown class %q: %w", tool.Name, tool.Class, tools.ErrInvalidTool)
	}
	if asked, ok := askedOf(err); ok && tool.Class != tools.ClassNatural && tool.Class != tools.ClassKeyed {
		// Nothing was completed; the run waits for a person's answer.
		st.called(a.Metrics, in.Tool, metrics.OutcomeAsked)
		log.Info("the tool's server asks a person before it completes the call", zap.String("question", asked.Summary()))
		return ToolOutput{Question: asked}, nil
	}
	if err != nil {
		outcome = failureOutcome(err)
		st.called(a.Metrics, in.Tool, outcome)
		log.Warn("tool call did not complete", zap.String("outcome", outcome), zap.Error(err))
		st.err = err
		if tool.Class == tools.ClassExternal {
			return ToolOutput{}, temporalError(err)
		}
		// A read has no effect, and a transactional tool's effect rolled
		// back with its key: data PostgreSQL refuses fails for good.
		return ToolOutput{}, dataError(err)
	}
	if out.Replayed {
		outcome = metrics.OutcomeReplayed
	}
	st.called(a.Metrics, in.Tool, outcome)
	log.Info("tool call completed", zap.String("outcome", outcome), zap.String("args_hash", p.ArgsHash))
	res := ToolOutput{Key: key.String(), Result: out.Result, Replayed: out.Replayed, Resolved: resolved, FollowUps: followUps}
	if isLocal(ctx) {
		// The run holds the key; its marker need not hold it again.
		res.Key = ""
	}
	return res, nil
}

func failureOutcome(err error) string {
	var app *temporal.ApplicationError
	switch {
	case errors.As(err, &app) && app.Type() == ErrTypeNeedsResolution:
		return metrics.OutcomeNeedsResolution
	case errors.Is(err, idempotency.ErrInFlight):
		return metrics.OutcomeInFlight
	case errors.Is(err, idempotency.ErrKeyReuse):
		return metrics.OutcomeKeyReuse
	case errors.Is(err, tools.ErrInvalidCall), errors.Is(err, keys.ErrInvalidArgs):
		return metrics.OutcomeInvalid
	}
	return metrics.OutcomeFailed
}

// runTool runs the tool and encodes its result as JSON.
func runTool(ctx context.Context, tool tools.Tool, call tools.Call) (json.RawMessage, error) {
	res, err := tool.Run(ctx, call)
	return encoded(tool, res, err)
}

// encoded is a tool's result as JSON, or its error, named.
func encoded(tool tools.Tool, res any, err error) (json.RawMessage, error) {
	if err != nil {
		return nil, fmt.Errorf("tool %s: %w", tool.Name, cleanError(err))
	}
	b, err := json.Marshal(res)
	if err != nil {
		return nil, temporal.NewNonRetryableApplicationError(
			fmt.Sprintf("tool %s: result is not JSON: %v", tool.Name, err), ErrTypeToolFailed, err)
	}
	return b, nil
}
