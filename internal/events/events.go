// Package events is each run's story as an ordered, durable log: the facts
// a person or a UI cares about, each with an offset in its root run's log
// that never changes (docs/events.md).
//
// Facts are written where they become true. A run records its own (see
// [Record], which the workflow's activities call with the facts the run
// made since it last wrote); the tables of effects, decisions, questions
// and operators' requests write theirs by trigger in the transaction that
// makes them true (migrations/023_run_events.sql). Each fact has a source
// that names it once per root run, so that a fact written again, by a
// retried activity or a replayed workflow task, is not a second event.
package events

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/oncerun/oncerun/internal/approvalstore"
)

// Event is one fact of a run's story as readers get it.
type Event struct {
	// Offset is the event's place in its root run's log, from 1; none on
	// an ephemeral event.
	Offset int64 `json:"offset,omitempty"`
	// Cursor is the event's place in its tenant's stream (GET /v1/events
	// only): an opaque string to resume after.
	Cursor    string `json:"cursor,omitempty"`
	RunID     string `json:"run_id"`
	RootRunID string `json:"root_run_id"`
	// Lineage is the run's tree from its root to the run itself.
	Lineage []string `json:"lineage"`
	// Step is the step the fact is about, if it is about one.
	Step int64           `json:"step,omitempty"`
	Type string          `json:"type"`
	At   time.Time       `json:"at"`
	Data json.RawMessage `json:"data"`
	// Ephemeral marks an event that is not in the log (a model's text as
	// it comes): a reader that missed it never gets it again.
	Ephemeral bool `json:"ephemeral,omitempty"`
}

// Fact is a fact a writer records.
type Fact struct {
	RunID string `json:"run_id"`
	// Source names the fact once per root run.
	Source string          `json:"source"`
	Step   int64           `json:"step,omitempty"`
	Type   string          `json:"type"`
	Data   json.RawMessage `json:"data,omitempty"`
	At     time.Time       `json:"at,omitzero"`
}

// Event types that end a run.
const (
	RunCompleted = "run.completed"
	RunFailed    = "run.failed"
	RunCancelled = "run.cancelled"
)

// Ends reports whether an event of type typ ends its run.
func Ends(typ string) bool {
	return typ == RunCompleted || typ == RunFailed || typ == RunCancelled
}

// Querier is a connection, a pool or a transaction.
type Querier interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// Record appends facts, in their order, to their root runs' logs, in one
// round trip; a fact whose source a log holds is skipped.
func Record(ctx context.Context, q Querier, tenant string, facts []Fact) error {
	if len(facts) == 0 {
		return nil
	}
	b, err := json.Marshal(facts)
	if err != nil {
		return fmt.Errorf("encode %d events: %w", len(facts), err)
	}
	// PostgreSQL calls a volatile function of the select list after the
	// sort: the facts are written in their order.
	_, err = q.Exec(ctx, `SELECT oncerun_emit($1, f->>'run_id', f->>'source', (f->>'step')::bigint, f->>'type', f->'data',
    (f->>'at')::timestamptz)
FROM jsonb_array_elements($2::jsonb) WITH ORDINALITY AS x(f, n) ORDER BY n`, tenant, b)
	if err != nil {
		return fmt.Errorf("record %d events of tenant %s: %w", len(facts), tenant, err)
	}
	return nil
}

// Root returns the root of run's tree: its id without its trailing
// .<number> parts (a child run's id is its parent's and the step's).
func Root(run string) string {
	for {
		dot := strings.LastIndexByte(run, '.')
		if dot <= 0 || dot == len(run)-1 || strings.Trim(run[dot+1:], "0123456789") != "" {
			return run
		}
		run = run[:dot]
	}
}

// Lineage returns run's tree from its root to run.
func Lineage(run string) []string {
	root := Root(run)
	out := []string{root}
	rest := strings.TrimPrefix(run, root)
	for rest != "" {
		next := strings.IndexByte(rest[1:], '.')
		if next < 0 {
			next = len(rest) - 1
		}
		out = append(out, out[len(out)-1]+rest[:next+1])
		rest = rest[next+1:]
	}
	return out
}

// MaxPage bounds a page of events.
const MaxPage = 1000

// RunQuery says which events of a root run's log to read.
type RunQuery struct {
	Tenant string
	// Run is the run followed: its own events and its children's.
	Run   string
	After int64
	Limit int
}

// ReadRun returns the events of q.Run and its descendants after offset
// q.After, in order, at most q.Limit.
func ReadRun(ctx context.Context, q Querier, rq RunQuery) ([]Event, error) {
	root := Root(rq.Run)
	rows, err := q.Query(ctx, `SELECT seq, run_id, step, type, at, data, '', 0::bigint FROM run_events
WHERE tenant = $1 AND root_run_id = $2 AND seq > $3 AND ($4 = $2 OR run_id = $4 OR run_id LIKE $5)
ORDER BY seq LIMIT $6`, rq.Tenant, root, rq.After, rq.Run, likePrefix(rq.Run), rq.Limit)
	if err != nil {
		return nil, fmt.Errorf("read the events of run %s: %w", rq.Run, err)
	}
	return scan(rows, root, false)
}

// likePrefix is the LIKE pattern of run's descendants.
func likePrefix(run string) string {
	r := strings.NewReplacer(`\`, `\\`, `%`, `\%`, `_`, `\_`)
	return r.Replace(run) + `.%`
}

func scan(rows pgx.Rows, root string, cursors bool) ([]Event, error) {
	defer rows.Close()
	var out []Event
	for rows.Next() {
		var (
			e    Event
			step *int64
			xid  uint64
			id   int64
		)
		var xidText string
		if err := rows.Scan(&e.Offset, &e.RunID, &step, &e.Type, &e.At, &e.Data, &xidText, &id); err != nil {
			return nil, fmt.Errorf("read an event: %w", err)
		}
		if step != nil {
			e.Step = *step
		}
		e.RootRunID = Root(e.RunID)
		if root != "" {
			e.RootRunID = root
		}
		e.Lineage = Lineage(e.RunID)
		if cursors {
			x, err := strconv.ParseUint(xidText, 10, 64)
			if err != nil {
				return nil, fmt.Errorf("read an event's transaction %q: %w", xidText, err)
			}
			xid = x
			e.Cursor = Cursor{XID: xid, ID: id}.String()
		}
		out = append(out, e)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read events: %w", err)
	}
	return out, nil
}

// Cursor is a place in a tenant's stream: the events of ended
// transactions in (transaction, id) order.
type Cursor struct {
	XID uint64
	ID  int64
}

func (c Cursor) String() string { return fmt.Sprintf("%d-%d", c.XID, c.ID) }

// ErrCursor is the error of a cursor that is not one a stream gave.
var ErrCursor = errors.New("not a cursor of this stream")

// ParseCursor reads a cursor a stream gave.
func ParseCursor(s string) (Cursor, error) {
	x, i, ok := strings.Cut(s, "-")
	if !ok {
		return Cursor{}, fmt.Errorf("%q: %w", s, ErrCursor)
	}
	xid, err1 := strconv.ParseUint(x, 10, 64)
	id, err2 := strconv.ParseInt(i, 10, 64)
	if err1 != nil || err2 != nil || id < 0 {
		return Cursor{}, fmt.Errorf("%q: %w", s, ErrCursor)
	}
	return Cursor{XID: xid, ID: id}, nil
}

// TenantQuery says which events of a tenant's runs to read.
type TenantQuery struct {
	Tenant string
	After  Cursor
	Limit  int
	// RunState keeps the events of runs in this state (running, paused,
	// completed, failed, cancelled); empty keeps all.
	RunState string
	// Tool keeps the events about calls of this tool.
	Tool string
	// Waiting keeps the events of runs with a step waiting for a person's
	// approval, answer or resolution.
	Waiting bool
}

// ReadTenant returns the events of the tenant's runs after q.After, at
// most q.Limit, in the order of the transactions that wrote them: only
// transactions that have ended are read, so that an event never appears
// behind a cursor already given.
func ReadTenant(ctx context.Context, q Querier, tq TenantQuery) ([]Event, error) {
	rows, err := q.Query(ctx, `SELECT e.seq, e.run_id, e.step, e.type, e.at, e.data, e.xid::text, e.id FROM run_events e
WHERE e.tenant = $1 AND (e.xid, e.id) > ($2::text::xid8, $3)
  AND e.xid < pg_snapshot_xmin(pg_current_snapshot())
  AND ($5 = '' OR EXISTS (SELECT 1 FROM run_index r WHERE r.tenant = e.tenant AND r.run_id = e.run_id AND r.state = $5))
  AND ($6 = '' OR e.data->>'tool' = $6)
  AND (NOT $7 OR e.run_id IN (`+approvalstore.WaitingRunsSQL+`))
ORDER BY e.xid, e.id LIMIT $4`, tq.Tenant, strconv.FormatUint(tq.After.XID, 10), tq.After.ID, tq.Limit, tq.RunState, tq.Tool, tq.Waiting)
	if err != nil {
		return nil, fmt.Errorf("read the events of tenant %s: %w", tq.Tenant, err)
	}
	return scan(rows, "", true)
}

// Head returns the cursor of the tenant's stream as it is now: the place
// after every event of an ended transaction.
func Head(ctx context.Context, q Querier, tenant string) (Cursor, error) {
	var (
		xid string
		id  int64
	)
	err := q.QueryRow(ctx, `SELECT coalesce(max(xid), '0'::xid8)::text, coalesce(max(id), 0) FROM run_events
WHERE tenant = $1 AND xid < pg_snapshot_xmin(pg_current_snapshot())
  AND xid = (SELECT max(xid) FROM run_events WHERE tenant = $1 AND xid < pg_snapshot_xmin(pg_current_snapshot()))`,
		tenant).Scan(&xid, &id)
	if err != nil {
		return Cursor{}, fmt.Errorf("read the head of tenant %s's stream: %w", tenant, err)
	}
	x, err := strconv.ParseUint(xid, 10, 64)
	if err != nil {
		return Cursor{}, fmt.Errorf("read the head of tenant %s's stream: transaction %q: %w", tenant, xid, err)
	}
	return Cursor{XID: x, ID: id}, nil
}

// RunExists reports whether the tenant's log holds the run (it started
// under this release) .
func RunExists(ctx context.Context, q Querier, tenant, run string) (bool, error) {
	var ok bool
	err := q.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM run_index WHERE tenant = $1 AND run_id = $2)`, tenant, run).Scan(&ok)
	if err != nil {
		return false, fmt.Errorf("look run %s up: %w", run, err)
	}
	return ok, nil
}
