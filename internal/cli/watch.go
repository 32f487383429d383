package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/spf13/cobra"

	"github.com/oncerun/oncerun/approvals"
	"github.com/oncerun/oncerun/internal/events"
	"github.com/oncerun/oncerun/worker"
)

// Exit statuses of `oncerun watch RUN-ID` other than 0 (the run
// completed) and 1 (the run failed, or watching it did).
const (
	exitRunCancelled = 2
	// exitInterrupted is the status of a watch stopped before its run
	// ended: 128 + SIGINT, as a shell reports it.
	exitInterrupted = 130
)

// Timing of the watch of the database (without ONCERUN_API).
const (
	// watchPoll is how often the log is read though PostgreSQL woke
	// nobody: a notification lost with a connection costs at most this.
	watchPoll = 2 * time.Second
	// watchRetry is the wait after a failed read before the next.
	watchRetry = 2 * time.Second
)

func newWatchCmd(conn *connections) *cobra.Command {
	var (
		tenant, after, runID string
		asJSON               bool
	)
	cmd := &cobra.Command{
		Use:   "watch (RUN-ID | --run-id R | --tenant T)",
		Short: "Follow the events of a run, or of every run of a tenant, as they come",
		Long: `Follow a run's story as it happens: one line per event (its time, its
offset in the run's log, the child run it is about, the step, the type and
what matters of its data: the tool, who decided, the error), and a model's
text as it comes. The events of the run's children are followed too.

oncerun watch RUN-ID (or --run-id R, as the other commands take it)
prints the run's events from its beginning (--after N:
from after offset N), then each as it comes, and exits once the run has
ended, with its outcome:

  0    the run completed
  1    the run failed (or the watch itself did: an unknown run, a refused token)
  2    the run was cancelled
  130  the watch was interrupted before the run ended

oncerun watch --tenant T follows every run of the tenant from the events to
come (--after CURSOR: from after an event's cursor) until it is
interrupted.

With ONCERUN_API the events come from the approvals service (GET
/v1/runs/{run_id}/events, GET /v1/events) as Server-Sent Events; a lost
connection is opened again, from the last event printed, so that no event
is printed twice or missed. The tenant is your token's: give RUN-ID alone,
or --tenant alone. Without it they are read from PostgreSQL (DATABASE_URL),
and a run needs its --tenant.

--json prints each event as one JSON object per line, as the API serves it:
offset, cursor (the tenant's stream only), run_id, root_run_id, lineage,
step, type, at, data and ephemeral.`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			w := &watcher{out: cmd.OutOrStdout(), errOut: cmd.ErrOrStderr(), asJSON: asJSON}
			if cmd.Flags().Changed("run-id") {
				if len(args) == 1 && args[0] != runID {
					return fmt.Errorf("two runs to follow: RUN-ID %q and --run-id %q; give one", args[0], runID)
				}
				args = []string{runID}
			}
			if len(args) == 1 {
				if args[0] == "" {
					return errors.New("the RUN-ID is empty")
				}
				w.run = args[0]
			}
			api, err := conn.api()
			if err != nil {
				return err
			}
			byTenant := cmd.Flags().Changed("tenant")
			switch {
			case w.run == "" && !byTenant:
				return errors.New("give the run to follow, oncerun watch RUN-ID, or --tenant T to follow every run of a tenant")
			case w.run != "" && byTenant && api != nil:
				return fmt.Errorf("--tenant with a RUN-ID and %s set: the run's tenant is your token's; give RUN-ID alone, or --tenant T alone to follow every run of the tenant", EnvAPI)
			case w.run != "" && !byTenant && api == nil:
				return errors.New("give --tenant T, the run's tenant (or set ONCERUN_API to ask the approvals service)")
			}
			if err := checkTenant(tenant); err != nil {
				return err
			}
			var offset int64
			if w.run != "" && after != "" {
				if offset, err = strconv.ParseInt(after, 10, 64); err != nil || offset < 0 {
					return fmt.Errorf("--after %q: give an offset in the run's log, a number from 0", after)
				}
			}
			if api != nil {
				err = w.followAPI(cmd.Context(), api, approvals.FollowRequest{RunID: w.run, After: offset, Cursor: after})
			} else {
				err = w.followDB(cmd.Context(), conn.env, tenant, offset, after)
			}
			return w.outcome(err)
		},
	}
	f := cmd.Flags()
	f.StringVar(&runID, "run-id", "", "the run to follow (the same as RUN-ID)")
	f.StringVar(&tenant, "tenant", "", "follow every run of this tenant (without ONCERUN_API: also the tenant of RUN-ID)")
	f.StringVar(&after, "after", "", "start after this offset of the run's log (default: its beginning), or after this cursor of the tenant's stream (default: the events to come)")
	f.BoolVar(&asJSON, "json", false, "print each event as a JSON object on a line")
	return cmd
}

// watcher prints the events of a watch.
type watcher struct {
	out, errOut io.Writer
	asJSON      bool
	// run is the run watched; empty when watching a tenant.
	run string
	// end is the event that ended the run.
	end *approvals.Event
	// text is the run and message of the text being printed on the
	// current line; empty when no line is open.
	text string
}

// outcome is the command's result once following stopped with err.
func (w *watcher) outcome(err error) error {
	w.closeText()
	if errors.Is(err, context.Canceled) {
		if w.run == "" {
			// A tenant's stream ends only this way.
			return nil
		}
		return &ExitError{Code: exitInterrupted, Err: fmt.Errorf("interrupted before run %s ended", w.run)}
	}
	if err != nil || w.end == nil {
		return err
	}
	why := ""
	var d map[string]any
	if json.Unmarshal(w.end.Data, &d) == nil {
		for _, k := range []string{"error", "message"} {
			if s, ok := d[k].(string); ok && s != "" {
				why = ": " + inline(s)
				break
			}
		}
	}
	switch w.end.Type {
	case events.RunCompleted:
		return nil
	case events.RunCancelled:
		return &ExitError{Code: exitRunCancelled, Err: fmt.Errorf("run %s was cancelled%s", w.run, why)}
	}
	return &ExitError{Code: 1, Err: fmt.Errorf("run %s failed%s", w.run, why)}
}

// follows reports whether run is the run watched or one of its children.
func (w *watcher) follows(run string) bool {
	return w.run == "" || run == w.run || strings.HasPrefix(run, w.run+".")
}

// print prints one event; it reports whether the event ended the run.
func (w *watcher) print(e approvals.Event) (bool, error) {
	if !w.follows(e.RunID) {
		return false, nil
	}
	ended := w.run != "" && e.RunID == w.run && events.Ends(e.Type)
	if ended {
		w.end = &e
	}
	if w.asJSON {
		b, err := json.Marshal(e)
		if err != nil {
			return ended, fmt.Errorf("encode an event: %w", err)
		}
		_, err = fmt.Fprintf(w.out, "%s\n", b)
		return ended, err
	}
	if e.Ephemeral && e.Type == "text.delta" {
		var d struct {
			MessageID string `json:"message_id"`
			Text      string `json:"text"`
		}
		_ = json.Unmarshal(e.Data, &d)
		if key := e.RunID + " " + d.MessageID; key != w.text {
			w.closeText()
			w.text = key
			fmt.Fprintf(w.out, "%s  text  ", w.head(e))
		}
		// A model's words stay on their line: a newline is shown as \n.
		_, err := io.WriteString(w.out, inline(d.Text))
		return ended, err
	}
	w.closeText()
	line := w.head(e) + "  " + e.Type
	if d := details(e.Data); d != "" {
		line += "  " + d
	}
	_, err := fmt.Fprintln(w.out, line)
	return ended, err
}

// head is the start of an event's line: its time, its offset, the run
// it is about when that is not the run watched, its step.
func (w *watcher) head(e approvals.Event) string {
	parts := []string{e.At.UTC().Format(time.RFC3339)}
	if e.Offset > 0 && w.run != "" {
		parts = append(parts, "#"+strconv.FormatInt(e.Offset, 10))
	}
	if e.RunID != w.run {
		parts = append(parts, e.RunID)
	}
	if e.Step > 0 {
		parts = append(parts, "step "+strconv.FormatInt(e.Step, 10))
	}
	return strings.Join(parts, "  ")
}

// closeText ends the line of a model's text, if one is open.
func (w *watcher) closeText() {
	if w.text != "" {
		fmt.Fprintln(w.out)
		w.text = ""
	}
}

// detailKeys are the fields of an event's data a line shows, in order;
// the others (hashes, keys, sizes) are in --json.
var detailKeys = []string{"tool", "by", "role", "via", "outcome", "goal", "planner", "parent_run_id", "parent_step",
	"child_run_id", "duplicate_of", "duplicate_of_run", "round", "turn", "calls", "done", "message_id", "steps",
	"reason", "comment", "message", "error"}

// details is what a line shows of an event's data: key=value pairs.
func details(raw json.RawMessage) string {
	var d map[string]json.RawMessage
	if json.Unmarshal(raw, &d) != nil {
		return ""
	}
	var parts []string
	for _, k := range detailKeys {
		v, ok := d[k]
		if !ok || string(v) == "null" {
			continue
		}
		parts = append(parts, k+"="+detailValue(v))
	}
	return strings.Join(parts, " ")
}

// detailValue is a value of an event's data on a line: a string cut to
// 200 bytes, quoted when it holds a space, a quote or an equals sign.
func detailValue(v json.RawMessage) string {
	var s string
	if json.Unmarshal(v, &s) != nil {
		var c bytes.Buffer
		if err := json.Compact(&c, v); err != nil {
			return string(v)
		}
		s = c.String()
	} else {
		s = strings.Join(strings.Fields(s), " ")
	}
	if len(s) > 200 {
		cut := 200
		for cut > 0 && s[cut]&0xC0 == 0x80 {
			cut--
		}
		s = s[:cut] + "…"
	}
	if s == "" || strings.ContainsAny(s, " \"=") || strconv.Quote(s) != `"`+s+`"` {
		return strconv.Quote(s)
	}
	return s
}

// followAPI follows through the approvals service.
func (w *watcher) followAPI(ctx context.Context, api *approvals.Client, f approvals.FollowRequest) error {
	f.Lost = func(err error, wait time.Duration) {
		w.closeText()
		fmt.Fprintf(w.errOut, "watch: %v; connecting again in %s\n", err, wait)
	}
	return api.Follow(ctx, f, func(e approvals.Event) error {
		_, err := w.print(e)
		return err
	})
}

// followDB follows the run's log, or the tenant's, in PostgreSQL: read,
// then wait for PostgreSQL to say it was written (or watchPoll), passing
// on the ephemeral events meanwhile.
func (w *watcher) followDB(ctx context.Context, env Env, tenant string, after int64, cursor string) error {
	pool, err := worker.NewPool(ctx, env.databaseURL())
	if err != nil {
		return err
	}
	defer pool.Close()
	cc := pool.Config().ConnConfig.Copy()
	hub := events.NewHub(func(ctx context.Context) (*pgx.Conn, error) { return pgx.ConnectConfig(ctx, cc) }, nil)
	defer hub.Close()

	var read func(ctx context.Context) ([]events.Event, error)
	root := ""
	if w.run != "" {
		ok, err := events.RunExists(ctx, pool, tenant, w.run)
		if err != nil {
			return err
		}
		if !ok {
			return fmt.Errorf("no run %q of tenant %s in the event log (a run started before the log was kept has no events: see oncerun status)", w.run, tenant)
		}
		root = events.Root(w.run)
		read = func(ctx context.Context) ([]events.Event, error) {
			evs, err := events.ReadRun(ctx, pool, events.RunQuery{Tenant: tenant, Run: w.run, After: after, Limit: events.MaxPage})
			if len(evs) > 0 {
				after = evs[len(evs)-1].Offset
			}
			return evs, err
		}
	} else {
		var tq events.TenantQuery
		if tq, err = tenantStart(ctx, pool, tenant, cursor); err != nil {
			return err
		}
		read = func(ctx context.Context) ([]events.Event, error) {
			evs, err := events.ReadTenant(ctx, pool, tq)
			if len(evs) > 0 {
				tq.After, err = events.ParseCursor(evs[len(evs)-1].Cursor)
			}
			return evs, err
		}
	}
	sub := hub.Subscribe(tenant, root)
	defer sub.Close()
	for {
		evs, err := read(ctx)
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if err != nil {
			w.closeText()
			fmt.Fprintf(w.errOut, "watch: %v; reading again in %s\n", err, watchRetry)
			if err := sleep(ctx, watchRetry); err != nil {
				return err
			}
			continue
		}
		for _, e := range evs {
			ended, err := w.print(e)
			if err != nil || ended {
				return err
			}
		}
		if len(evs) == events.MaxPage {
			continue
		}
		if err := w.waitDB(ctx, sub); err != nil {
			return err
		}
	}
}

// tenantStart is the query of the tenant's events after cursor, or, with
// none, after those written so far.
func tenantStart(ctx context.Context, pool *pgxpool.Pool, tenant, cursor string) (events.TenantQuery, error) {
	tq := events.TenantQuery{Tenant: tenant, Limit: events.MaxPage}
	var err error
	if cursor != "" {
		if tq.After, err = events.ParseCursor(cursor); err != nil {
			return tq, fmt.Errorf("--after: %w", err)
		}
		return tq, nil
	}
	tq.After, err = events.Head(ctx, pool, tenant)
	return tq, err
}

// waitDB waits until the log may have news, printing the ephemeral events
// that come meanwhile.
func (w *watcher) waitDB(ctx context.Context, sub *events.Subscription) error {
	poll := time.NewTimer(watchPoll)
	defer poll.Stop()
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-sub.Wake:
			return nil
		case <-poll.C:
			return nil
		case e := <-sub.Ephemeral:
			if _, err := w.print(e); err != nil {
				return err
			}
		}
	}
}

// sleep waits d, or until ctx is done.
func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
