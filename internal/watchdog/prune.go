package watchdog

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"go.temporal.io/sdk/temporal"
	"go.uber.org/zap"

	"github.com/oncerun/oncerun/activities"
	"github.com/oncerun/oncerun/internal/alerts"
	"github.com/oncerun/oncerun/internal/events"
	"github.com/oncerun/oncerun/internal/idempotency"
	"github.com/oncerun/oncerun/internal/metrics"
	"github.com/oncerun/oncerun/internal/runs"
	"github.com/oncerun/oncerun/tools"
)

// Activities carries what the watchdog's activity needs. [Register]
// registers its PruneExpired on a worker.
type Activities struct {
	// Pool is the worker's PostgreSQL pool.
	Pool *pgxpool.Pool
	// Tools is the worker's tool registry: a held key's expiry is extended
	// by its tool's retention window.
	Tools *tools.Registry
	// Runs tells which runs are open: a *runs.Client in a worker.
	Runs runs.States
	// Alerts posts each new alert to a webhook. Nil posts nothing.
	Alerts *alerts.Webhook
	// Metrics counts pruned keys and alerts. Nil counts nothing.
	Metrics *metrics.Metrics
	// Log receives the alerts' error lines. Default: none.
	Log *zap.Logger
}

// PruneInput is one watchdog batch.
type PruneInput struct {
	// Cutoff: keys that expired before it are due.
	Cutoff time.Time `json:"cutoff"`
	// BatchSize bounds the keys locked at once.
	BatchSize int `json:"batch_size"`
	// Policy is PolicyHold or PolicyPrune, for keys of open runs.
	Policy string `json:"policy"`
}

// PruneOutput counts what one batch did.
type PruneOutput struct {
	Selected int `json:"selected"`
	// Pruned counts keys of closed runs deleted.
	Pruned int `json:"pruned"`
	// Held and PrunedAlive count keys of open runs held or deleted; each
	// raised an alert.
	Held        int `json:"held"`
	PrunedAlive int `json:"pruned_alive"`
	// Alerts counts the alerts raised (a key already alerted on for the same
	// action and expiry is not alerted on again).
	Alerts int `json:"alerts"`
	// Skipped counts keys left for a later pass because Temporal could not
	// say whether their run is open.
	Skipped int `json:"skipped,omitempty"`
	// Events counts the events removed with the last keys of ended runs
	// (docs/events.md, "Retention").
	Events int64 `json:"events,omitempty"`
	// DBTime is how long the batch kept the database busy: its read and its
	// transaction, not the questions to Temporal. The watchdog sizes its
	// pause before the next batch from it.
	DBTime time.Duration `json:"db_time,omitempty"`
}

type runRef struct{ tenant, runID string }

// describeTimeout bounds one question to Temporal about a run.
const describeTimeout = 10 * time.Second

// PruneExpired handles one batch of keys that expired before the cutoff,
// oldest first.
//
//  1. It reads the batch without locking it ([idempotency.DueKeys]: a key
//     in flight under a live lease is never due), and asks Temporal, once
//     per distinct run and outside any transaction, whether the run is
//     open. A run Temporal cannot answer for is skipped and left for a
//     later pass.
//  2. In one short transaction it locks the keys that are still due
//     ([idempotency.LockDueKeys]: concurrent watchdogs take disjoint keys,
//     and a claim waits at most for this transaction) and acts: keys of
//     closed runs are deleted; keys of open runs are held (expiry extended
//     by the tool's window) or deleted, by policy, except keys in flight,
//     which are always held, since their outcome may still be unknown.
//     Each key of an open run gets an alert row in the same transaction.
//  3. After the commit, each new alert is logged at error level, counted
//     and posted to the webhook.
//
// It reports the time the read and the transaction took (DBTime), from
// which the watchdog sizes its pause before the next batch.
func (a *Activities) PruneExpired(ctx context.Context, in PruneInput) (PruneOutput, error) {
	if in.Policy != PolicyHold && in.Policy != PolicyPrune {
		return PruneOutput{}, temporal.NewNonRetryableApplicationError(
			fmt.Sprintf("expiry policy %q is not hold or prune", in.Policy), activities.ErrTypeInvalidArgs, nil)
	}
	in.BatchSize = cmp.Or(in.BatchSize, DefaultBatchSize)
	start := time.Now()
	cands, err := idempotency.DueKeys(ctx, a.Pool, in.Cutoff, in.BatchSize)
	if err != nil {
		return PruneOutput{}, err
	}
	out := PruneOutput{Selected: len(cands), DBTime: time.Since(start)}
	if len(cands) == 0 {
		return out, nil
	}
	states, failed := a.runStates(ctx, cands)
	if len(states) == 0 && failed > 0 {
		return out, fmt.Errorf("no run of the batch could be described; Temporal may be unreachable")
	}

	var (
		pruned []string // tools of the closed runs' keys deleted
		raised []alerts.KeyExpired
	)
	start = time.Now()
	err = pgx.BeginFunc(ctx, a.Pool, func(tx pgx.Tx) error {
		refs := make([]idempotency.KeyRef, 0, len(cands))
		for _, k := range cands {
			if _, known := states[runRef{k.Tenant, k.RunID}]; known {
				refs = append(refs, k.Ref())
			}
		}
		due, err := idempotency.LockDueKeys(ctx, tx, in.Cutoff, refs)
		if err != nil {
			return err
		}
		var (
			del  []idempotency.KeyRef
			hold []idempotency.KeyHold
			// ended are the closed runs whose keys go: their story may go
			// with the last of them (events.PruneEnded).
			endedTenants, endedRuns []string
		)
		actions := map[string]string{} // key -> policy action, for keys of open runs
		for _, k := range due {
			state := states[runRef{k.Tenant, k.RunID}]
			switch {
			case state == "":
				del = append(del, k.Ref())
				pruned = append(pruned, k.Tool)
				endedTenants, endedRuns = append(endedTenants, k.Tenant), append(endedRuns, k.RunID)
			case in.Policy == PolicyHold || k.InFlight():
				hold = append(hold, idempotency.KeyHold{KeyRef: k.Ref(), Until: in.Cutoff.Add(a.window(k.Tool))})
				actions[k.Key] = PolicyHold
			default:
				del = append(del, k.Ref())
				actions[k.Key] = PolicyPrune
			}
		}
		if _, err := idempotency.DeleteKeys(ctx, tx, del); err != nil {
			return err
		}
		if err := idempotency.HoldKeys(ctx, tx, hold); err != nil {
			return err
		}
		if out.Events, err = events.PruneEnded(ctx, tx, endedTenants, endedRuns); err != nil {
			return err
		}
		raised, err = recordAlerts(ctx, tx, due, states, actions)
		return err
	})
	if err != nil {
		return PruneOutput{}, err
	}
	out.DBTime += time.Since(start)
	for _, k := range cands {
		if _, known := states[runRef{k.Tenant, k.RunID}]; !known {
			out.Skipped++
		}
	}
	// Committed: now say so.
	out.Pruned = len(pruned)
	for _, tool := range pruned {
		if a.Metrics != nil {
			a.Metrics.KeysPruned.WithLabelValues(tool).Inc()
		}
	}
	for _, al := range raised {
		out.Alerts++
		if al.Policy == PolicyHold {
			out.Held++
		} else {
			out.PrunedAlive++
		}
		if a.Metrics != nil {
			a.Metrics.KeysExpiredAlive.WithLabelValues(al.Tool, al.Policy).Inc()
		}
		a.log().Error("key expired while its run is alive",
			zap.String("tenant", al.Tenant), zap.String("run_id", al.RunID), zap.Int64("step", al.Step),
			zap.String("tool", al.Tool), zap.String("key", al.Key), zap.Duration("age", time.Duration(al.AgeSec*float64(time.Second))),
			zap.String("run_state", al.RunState), zap.String("key_state", al.KeyState), zap.String("policy", al.Policy),
			zap.Time("expired_at", al.ExpiredAt))
		a.Alerts.Send(al)
	}
	return out, nil
}

func (a *Activities) log() *zap.Logger {
	if a.Log == nil {
		return zap.NewNop()
	}
	return a.Log
}

// runStates asks, once per distinct run of ks, whether the run is open:
// the map holds the run's state in words for an open run and "" for a
// closed one. A run that could not be described is left out and counted in
// failed.
func (a *Activities) runStates(ctx context.Context, ks []idempotency.ExpiringKey) (states map[runRef]string, failed int) {
	states = map[runRef]string{}
	seen := map[runRef]bool{}
	for _, k := range ks {
		ref := runRef{k.Tenant, k.RunID}
		if seen[ref] {
			continue
		}
		seen[ref] = true
		cctx, cancel := context.WithTimeout(ctx, describeTimeout)
		open, word, err := a.Runs.RunState(cctx, k.Tenant, k.RunID)
		cancel()
		switch {
		case err != nil:
			failed++
			a.log().Warn("watchdog could not tell whether a run is open; its keys wait for a later pass",
				zap.String("tenant", k.Tenant), zap.String("run_id", k.RunID), zap.Error(err))
		case open:
			states[ref] = word
		default:
			states[ref] = ""
		}
	}
	return states, failed
}

// window is the retention of a tool's keys.
func (a *Activities) window(tool string) time.Duration {
	if t, ok := a.Tools.Lookup(tool); ok {
		return t.Retention
	}
	return idempotency.DefaultRetention
}

// recordAlerts writes an alert row for each key of an open run and returns
// the alerts that were new: a row for the same key, action and expiry means
// the alert was raised already.
func recordAlerts(ctx context.Context, tx pgx.Tx, due []idempotency.ExpiringKey, open map[runRef]string, actions map[string]string) ([]alerts.KeyExpired, error) {
	var batch pgx.Batch
	var cands []alerts.KeyExpired
	for _, k := range due {
		state := open[runRef{k.Tenant, k.RunID}]
		policy, ok := actions[k.Key]
		if state == "" || !ok {
			continue
		}
		cands = append(cands, alerts.KeyExpired{
			Alert: "key_expired_while_run_alive", Tenant: k.Tenant, RunID: k.RunID, Step: k.Step, Tool: k.Tool,
			Key: k.Key, Policy: policy, RunState: state, KeyState: string(k.State), ExpiredAt: k.ExpiresAt,
		})
		batch.Queue(`
INSERT INTO key_expiry_alerts (tenant, key, run_id, step, tool, policy, run_state, key_state, created_at, expired_at)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)
ON CONFLICT ON CONSTRAINT key_expiry_alerts_once DO NOTHING
RETURNING raised_at, extract(epoch FROM raised_at - $9)::float8`,
			k.Tenant, k.Key, k.RunID, k.Step, k.Tool, policy, state, string(k.State), k.CreatedAt, k.ExpiresAt)
	}
	if len(cands) == 0 {
		return nil, nil
	}
	res := tx.SendBatch(ctx, &batch)
	defer res.Close()
	var fresh []alerts.KeyExpired
	for _, c := range cands {
		err := res.QueryRow().Scan(&c.RaisedAt, &c.AgeSec)
		switch {
		case errors.Is(err, pgx.ErrNoRows):
			continue
		case err != nil:
			return nil, fmt.Errorf("record alert for %s: %w", c.Key, err)
		}
		fresh = append(fresh, c)
	}
	return fresh, res.Close()
}
