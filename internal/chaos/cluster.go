package chaos

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"path/filepath"
	"strconv"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/oncerun/oncerun/internal/devserver"
	"github.com/oncerun/oncerun/internal/untrusted"
)

// clusterNodes is how many Temporal nodes the cluster has.
const clusterNodes = 2

// startCluster starts Temporal as a cluster (TemporalCluster): it makes
// the cluster's two databases beside its own, puts its load balancer in
// front of two frontend addresses, and starts a node on each, both at
// once, as a cluster's nodes come up after an outage. Every process then
// reaches Temporal through the load balancer.
func (h *harness) startCluster(ctx context.Context) error {
	cl := devserver.Cluster{DatabasePrefix: h.dbName}
	mainDB, visibilityDB := cl.Databases()
	for _, name := range []string{mainDB, visibilityDB} {
		if err := h.createDatabase(ctx, name); err != nil {
			return err
		}
		h.temporalDBs = append(h.temporalDBs, name)
	}
	ports := make([]int, clusterNodes)
	backends := make([]string, clusterNodes)
	for i := range ports {
		port, err := devserver.FreePort("127.0.0.1")
		if err != nil {
			return err
		}
		ports[i], backends[i] = port, net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	}
	addr, err := freeAddr()
	if err != nil {
		return err
	}
	if h.lb, err = newForwarder(addr, backends); err != nil {
		return fmt.Errorf("start the load balancer: %w", err)
	}
	for i, port := range ports {
		name := fmt.Sprintf("temporal-node-%d", i)
		h.nodes = append(h.nodes, &proc{name: name, binary: h.cfg.Binary, logPath: logPath(h.cfg.Dir, name),
			args: []string{"temporal-server", "--postgres", h.cfg.DatabaseURL, "--databases", cl.DatabasePrefix,
				"--port", strconv.Itoa(port), "--cluster-address", h.lb.Addr(),
				"--history-shards", strconv.Itoa(devserver.DefaultHistoryShards),
				"--data-dir", filepath.Join(h.cfg.Dir, name)},
			healthy: func(ctx context.Context) bool { return temporalUp(ctx, backends[i]) }})
	}
	errs := make([]error, len(h.nodes))
	var wg sync.WaitGroup
	for i, n := range h.nodes {
		wg.Go(func() { errs[i] = n.start(ctx, 3*time.Minute) })
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return err
	}
	if !temporalUp(ctx, h.lb.Addr()) {
		return fmt.Errorf("the Temporal cluster does not answer through the load balancer at %s", h.lb.Addr())
	}
	return nil
}

// createDatabase creates a database of the harness's own. It never drops
// one first: a database of that name is another harness's, or one kept
// for inspection. Only the databases made here are dropped at the end.
func (h *harness) createDatabase(ctx context.Context, name string) error {
	conn, err := pgx.Connect(ctx, h.cfg.DatabaseURL)
	if err != nil {
		return fmt.Errorf("connect to PostgreSQL (%s): %w", untrusted.Redact(h.cfg.DatabaseURL), err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize()); err != nil {
		return fmt.Errorf("make database %s: %w", name, err)
	}
	return nil
}

// deadNodes lists the nodes that are not running: a node that exited by
// itself, which only the harness's kills may end.
func (h *harness) deadNodes() []string {
	var out []string
	for _, n := range h.nodes {
		if up, _ := n.running(); !up {
			out = append(out, fmt.Sprintf("Temporal %s exited by itself: %s; its log is %s", n.name, n.exitState(), n.logPath))
		}
	}
	return out
}

// shardAcquisitions reads, from the cluster's shards table, how many times
// a node took a history shard: each acquisition raises the shard's range
// id by one, fencing off the node that held it before.
func (h *harness) shardAcquisitions(ctx context.Context) (int, error) {
	u, err := url.Parse(h.cfg.DatabaseURL)
	if err != nil {
		return 0, err
	}
	mainDB, _ := devserver.Cluster{DatabasePrefix: h.dbName}.Databases()
	u.Path = "/" + mainDB
	conn, err := pgx.Connect(ctx, u.String())
	if err != nil {
		return 0, fmt.Errorf("connect to %s: %w", mainDB, err)
	}
	defer conn.Close(ctx)
	var n int
	if err := conn.QueryRow(ctx, "SELECT coalesce(sum(range_id), 0) FROM shards").Scan(&n); err != nil {
		return 0, fmt.Errorf("read the shards of %s: %w", mainDB, err)
	}
	return n, nil
}

// restartNodes SIGKILLs a node of the cluster at moments spread over the
// window, the nodes in turn, keeps it down for NodeDown while runs and
// approvals go on against the other, and starts it again on its ports.
// One node at most is down at a time.
func (h *harness) restartNodes(ctx context.Context) {
	i := 0
	h.at(ctx, h.cfg.TemporalRestarts, func() {
		n := h.nodes[i%len(h.nodes)]
		i++
		if !n.kill() {
			h.violate("%s was not running when it was to be killed: %s", n.name, n.exitState())
		}
		h.fault(&h.counts.NodeKills)
		killed := time.Now()
		down := time.NewTimer(h.cfg.NodeDown)
		defer down.Stop()
		select {
		case <-down.C:
		case <-ctx.Done():
			if errors.Is(ctx.Err(), context.Canceled) {
				return // the harness is stopping
			}
			<-down.C // the window ended: the node still comes back
		}
		began := time.Now()
		if err := n.start(context.WithoutCancel(ctx), 3*time.Minute); err != nil {
			h.violate("Temporal %s did not come back: %v", n.name, err)
			return
		}
		h.fault(&h.counts.NodeRestarts)
		h.say("Temporal %s killed, down %.1fs, back in %.1fs; connections through the load balancer per node: %v",
			n.name, began.Sub(killed).Seconds(), time.Since(began).Seconds(), h.lb.Joined())
	})
}
