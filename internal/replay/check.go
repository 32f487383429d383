package replay

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"sync"

	historypb "go.temporal.io/api/history/v1"
	"go.temporal.io/sdk/client"

	"github.com/oncerun/oncerun/tools"
	"github.com/oncerun/oncerun/workflows"
)

// DefaultConcurrency is how many runs a check works on at once by default:
// each reads a history from Temporal and replays it.
const DefaultConcurrency = 8

// Config configures a check.
type Config struct {
	// Registry is this build's tool registry, as its workers build it
	// (worker.Registry of the configuration the build will run with).
	// Required.
	Registry *tools.Registry
	// Temporal reads the histories of the executions that name no file.
	Temporal client.Client
	// Concurrency is how many runs are checked at once. Default
	// DefaultConcurrency.
	Concurrency int
}

// WithDefaults returns c with zero fields set to their defaults.
func (c Config) WithDefaults() Config {
	c.Concurrency = cmp.Or(c.Concurrency, DefaultConcurrency)
	return c
}

func (c Config) validate() error {
	if c.Registry == nil {
		return errors.New("replay: Registry is required")
	}
	if c.Concurrency < 1 {
		return fmt.Errorf("replay: Concurrency %d: want at least 1", c.Concurrency)
	}
	return nil
}

// Check checks each of execs with this build (see the package's
// documentation), Config.Concurrency at a time, and reports them in the
// order given. A run whose history cannot be read is reported not
// checked; the error is for a configuration that checks nothing.
func Check(ctx context.Context, cfg Config, execs []Execution) (Report, error) {
	cfg = cfg.WithDefaults()
	if err := cfg.validate(); err != nil {
		return Report{}, err
	}
	results := make([]Result, len(execs))
	next := make(chan int)
	var wg sync.WaitGroup
	for range min(cfg.Concurrency, len(execs)) {
		wg.Go(func() {
			for i := range next {
				results[i] = checkOne(ctx, cfg, execs[i])
			}
		})
	}
	for i := range execs {
		next <- i
	}
	close(next)
	wg.Wait()
	return newReport(results), nil
}

// checkOne reads the history of e and checks it.
func checkOne(ctx context.Context, cfg Config, e Execution) Result {
	if err := ctx.Err(); err != nil {
		r := newResult(e)
		r.Error = fmt.Sprintf("not read: %v", err)
		return r
	}
	h, err := fetch(ctx, cfg.Temporal, e)
	if err != nil {
		r := newResult(e)
		r.Error = err.Error()
		return r
	}
	return checkHistory(cfg.Registry, e, h)
}

// newResult is the result of e before it is checked.
func newResult(e Execution) Result {
	r := Result{WorkflowID: e.WorkflowID, TemporalRunID: e.RunID, File: e.File, Identity: []Change{}}
	r.Tenant, r.RunID = tenantAndRun(e.WorkflowID)
	return r
}

// checkHistory checks h, the history of e, against this build's code and
// reg.
func checkHistory(reg *tools.Registry, e Execution, h *historypb.History) Result {
	r := newResult(e)
	f, err := readFacts(h)
	if err != nil {
		r.Error = err.Error()
		return r
	}
	if f.input.Tenant != "" && f.input.RunID != "" {
		r.Tenant, r.RunID = f.input.Tenant, f.input.RunID
		if r.WorkflowID == "" {
			r.WorkflowID = workflows.WorkflowID(r.Tenant, r.RunID)
		}
	}
	r.Open = f.open
	if r.TemporalRunID == "" && e.File == "" {
		r.TemporalRunID = h.GetEvents()[0].GetWorkflowExecutionStartedEventAttributes().GetOriginalExecutionRunId()
	}
	if !f.decided {
		// Just started: no build decided anything yet, and this one will
		// run the run from its start.
		r.OK = true
		return r
	}
	got, err := replayHistory(r.WorkflowID, e.RunID, h)
	if err != nil {
		r.ReplayError = err.Error()
		r.FirstEvent = firstEvent(h, err, got.task)
		return r
	}
	if !f.open {
		r.OK = true
		return r
	}
	if got.status == nil {
		r.Error = errNoStatus.Error()
		return r
	}
	r.Identity = append(r.Identity, stepChanges(reg, *got.status)...)
	if !f.identity {
		changes, skipped := turnChanges(reg, f.turns, got.plans)
		r.Identity = append(r.Identity, changes...)
		r.Skipped = skipped
	}
	r.OK = len(r.Identity) == 0
	return r
}
