package links

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgconn/ctxwatch"
	"go.temporal.io/sdk/client"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Postgres is the link to the PostgreSQL server cfg connects to, probed
// with `SELECT 1` on a connection of its own, outside the pool: a pool
// whose connections all hang on a black-holed server cannot say so, and a
// probe must not wait behind the work it judges. A probe whose deadline
// passes drops its connection at once (no cancel request, which would hang
// on the same network), and the next probe connects again.
func Postgres(cfg *pgx.ConnConfig) Link {
	cfg = cfg.Copy()
	cfg.Tracer = nil
	cfg.BuildContextWatcherHandler = func(c *pgconn.PgConn) ctxwatch.Handler {
		return &pgconn.DeadlineContextWatcherHandler{Conn: c.Conn()}
	}
	p := &pgProbe{cfg: cfg}
	return Link{Name: "postgres", Probe: p.probe, Close: p.close}
}

func (p *pgProbe) close() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.conn != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
		defer cancel()
		_ = p.conn.Close(ctx)
		p.conn = nil
	}
}

type pgProbe struct {
	cfg *pgx.ConnConfig

	mu   sync.Mutex
	conn *pgx.Conn
}

func (p *pgProbe) probe(ctx context.Context) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.conn == nil {
		c, err := pgx.ConnectConfig(ctx, p.cfg)
		if err != nil {
			return answered(err)
		}
		p.conn = c
	}
	if _, err := p.conn.Exec(ctx, "SELECT 1"); err != nil {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 100*time.Millisecond)
		defer cancel()
		_ = p.conn.Close(cctx)
		p.conn = nil
		return answered(err)
	}
	return nil
}

// answered is nil when err is the server's own answer (too many
// connections, a role's connection limit): the server is there, and the
// pool may well be served. The probe's connection is one more than the
// pool's.
func answered(err error) error {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		return nil
	}
	return err
}

// Temporal is the link to the Temporal frontend c is connected to, probed
// with its gRPC health check on c's own connection: the one the worker's
// pollers and completions use.
func Temporal(c client.Client) Link {
	return Link{Name: "temporal", Probe: func(ctx context.Context) error {
		_, err := c.CheckHealth(ctx, &client.CheckHealthRequest{})
		switch status.Code(err) {
		case codes.OK, codes.Unavailable, codes.DeadlineExceeded, codes.Canceled, codes.Unknown:
			return err
		}
		// Any other status is an answer: a frontend, or a proxy in front of
		// it, that does not serve the health check (Unimplemented,
		// PermissionDenied) is reachable all the same.
		return nil
	}}
}
