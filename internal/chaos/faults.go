package chaos

import (
	"context"
	"net/http"
	"os/exec"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	sandbox "github.com/oncerun/oncerun/internal/sandbox/payments"
)

// sleepJittered waits about d (between half and one and a half of it).
func (h *harness) sleepJittered(ctx context.Context, d time.Duration) bool {
	d = time.Duration((0.5 + h.float()) * float64(d))
	select {
	case <-ctx.Done():
		return false
	case <-time.After(d):
		return true
	}
}

// killWorkers SIGKILLs a random live worker at random moments until it has
// killed Kills times or the window ends.
func (h *harness) killWorkers(ctx context.Context) {
	if h.cfg.Kills == 0 {
		return
	}
	// A little faster than Duration/Kills: a kill is skipped when the
	// worker picked is not up, and the window must hold them all.
	every := h.cfg.Duration * 4 / time.Duration(5*h.cfg.Kills)
	for h.sleepJittered(ctx, every) {
		h.mu.Lock()
		done := h.counts.WorkerKills >= h.cfg.Kills
		h.mu.Unlock()
		if done {
			return
		}
		w := h.workers[h.intN(len(h.workers))]
		if w.chaosKill() {
			h.fault(&h.counts.WorkerKills)
		}
	}
}

// at waits for each of n moments spread evenly over the window and calls f.
func (h *harness) at(ctx context.Context, n int, f func()) {
	for i := range n {
		h.mu.Lock()
		start := h.windowStart
		h.mu.Unlock()
		when := start.Add(time.Duration((float64(i) + 0.5) / float64(n) * float64(h.cfg.Duration)))
		select {
		case <-ctx.Done():
			return
		case <-time.After(time.Until(when)):
		}
		f()
	}
}

// restartTemporal SIGKILLs the Temporal server and starts it again on its
// data directory and port; with TemporalCluster, one node at a time.
func (h *harness) restartTemporal(ctx context.Context) {
	if h.cfg.Temporal == TemporalCluster {
		h.restartNodes(ctx)
		return
	}
	h.at(ctx, h.cfg.TemporalRestarts, func() {
		h.temporal.kill()
		h.fault(&h.counts.TemporalKills)
		began := time.Now()
		if err := h.temporal.start(context.WithoutCancel(ctx), 3*time.Minute); err != nil {
			h.violate("the Temporal server did not come back: %v", err)
			return
		}
		h.fault(&h.counts.TemporalRestarts)
		h.say("Temporal server killed and back in %.1fs", time.Since(began).Seconds())
	})
}

// restartPostgres restarts PostgreSQL (or cuts every connection to the
// harness's databases, the Temporal cluster's included) and waits until it
// answers again.
func (h *harness) restartPostgres(ctx context.Context) {
	h.at(ctx, h.cfg.PGRestarts, func() {
		began := time.Now()
		switch h.cfg.PGRestart {
		case PGRestartCluster:
			out, err := exec.Command(h.cfg.RestartCommand[0], h.cfg.RestartCommand[1:]...).CombinedOutput()
			if err != nil {
				h.violate("restart PostgreSQL (%s): %v: %s", strings.Join(h.cfg.RestartCommand, " "), err, out)
				return
			}
		case PGRestartBackends:
			if err := h.terminateBackends(ctx); err != nil {
				h.violate("cut PostgreSQL's connections: %v", err)
				return
			}
		}
		h.fault(&h.counts.PGRestarts)
		if !retry(ctx, 200*time.Millisecond, func() bool {
			c, err := pgx.Connect(ctx, h.dbURL)
			if err != nil {
				return false
			}
			_ = c.Close(ctx)
			return true
		}) {
			return
		}
		h.say("PostgreSQL %s and answering again in %.1fs", map[string]string{
			PGRestartCluster: "restarted", PGRestartBackends: "connections cut"}[h.cfg.PGRestart], time.Since(began).Seconds())
	})
}

func (h *harness) terminateBackends(ctx context.Context) error {
	c, err := pgx.Connect(ctx, h.cfg.DatabaseURL)
	if err != nil {
		return err
	}
	defer c.Close(ctx)
	_, err = c.Exec(ctx, `SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = ANY($1) AND pid <> pg_backend_pid()`,
		append([]string{h.dbName}, h.temporalDBs...))
	return err
}

// The provider's faults, in turn. read_unavailable answers the next three
// reads with 503, so that a paired read fails and a person must resolve.
var providerFaults = []struct {
	mode  string
	count int
}{
	{sandbox.FaultDropAfterApply, 1},
	{sandbox.FaultErrorAfterApply, 1},
	{sandbox.FaultErrorBeforeApply, 1},
	{"delay=3s", 1},
	{sandbox.FaultDropAfterApply, 1},
	{sandbox.FaultReadUnavailable, 3},
}

// injectFaults queues provider faults for FaultRate of the refunds and
// drops the connection after the SMTP server accepted FaultRate of the
// e-mails, spread over the window.
func (h *harness) injectFaults(ctx context.Context) {
	n := int(h.cfg.FaultRate*float64(len(h.runs)) + 0.5)
	if n == 0 {
		return
	}
	i := 0
	h.at(ctx, n, func() {
		f := providerFaults[i%len(providerFaults)]
		i++
		a := h.provider.do(ctx, http.MethodPost, "/v1/sandbox/faults", map[string]any{"mode": f.mode, "count": f.count})
		if a.status == http.StatusOK {
			h.mu.Lock()
			h.counts.ProviderFaults += f.count
			h.lastFault = time.Now()
			h.mu.Unlock()
		}
		h.mail.DropAfterAccept(1)
		h.fault(&h.counts.MailFaults)
	})
	h.clearFaults()
}

// clearFaults takes back the provider faults no request met, so that the
// settling and the checks read an honest ledger, and counts only the
// faults requests met.
func (h *harness) clearFaults() {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var left struct {
		Data []sandbox.Fault `json:"data"`
	}
	if err := h.provider.get(ctx, "/v1/sandbox/faults", &left); err != nil {
		h.violate("list the provider's faults: %v", err)
		return
	}
	for _, f := range left.Data {
		if a := h.provider.do(ctx, http.MethodPost, "/v1/sandbox/faults", map[string]any{"mode": f.Mode, "count": 0}); a.status != http.StatusOK {
			h.violate("clear the provider's %s fault: %s", f.Mode, a)
			continue
		}
		h.mu.Lock()
		h.counts.ProviderFaults -= f.Count
		h.mu.Unlock()
	}
	h.mail.DropAfterAccept(0)
}
