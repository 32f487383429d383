package worker

import (
	"context"
	"fmt"
	"net"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"go.temporal.io/sdk/client"
	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
)

// The bounds on how long a connection of a worker may hang (docs/
// reliability.md, "Timeouts", gives the reasoning for each). A setting
// DATABASE_URL names itself (statement_timeout=0, for example) is kept.
const (
	// pgStatementTimeout: the server cancels a statement that runs longer.
	// Every statement of oncerun's is short; a long one is a server in
	// trouble or a lock held by a worker that is gone.
	pgStatementTimeout = "60s"
	// pgIdleInTransaction: the server ends a session that keeps a
	// transaction open without a statement for longer, releasing its locks.
	// A step's transaction holds its key's row; a worker cut off in the
	// middle of one would otherwise hold it until TCP gives up, and the
	// worker that takes the step over would wait behind it.
	pgIdleInTransaction = "15s"
	// pgTCPUserTimeout (ms) and the keepalives: each side drops a
	// connection whose sent bytes go unacknowledged this long, or whose
	// peer answers no keepalive, instead of waiting out the kernel's
	// retransmissions (about 15 minutes).
	pgTCPUserTimeout  = 15 * time.Second
	pgKeepAliveIdle   = 5 * time.Second
	pgKeepAliveEvery  = 5 * time.Second
	pgKeepAliveProbes = 3
	// temporalKeepAlive and temporalKeepAliveTimeout: the gRPC client
	// pings an idle connection this often and drops it when a ping goes
	// unanswered this long. The frontend refuses pings more often than
	// every 10 s by default.
	temporalKeepAlive        = 15 * time.Second
	temporalKeepAliveTimeout = 5 * time.Second
	// temporalReconnectMax is the longest wait between two attempts to
	// connect to Temporal again, temporalMinConnect how long one attempt
	// may take (the SDK's own).
	temporalReconnectMax = 2 * time.Second
	temporalMinConnect   = 20 * time.Second
)

// pgBounds are the server-side settings boundPool gives a session, in
// the order they are set.
var pgBounds = [][2]string{
	{"statement_timeout", pgStatementTimeout},
	{"idle_in_transaction_session_timeout", pgIdleInTransaction},
	{"tcp_keepalives_idle", seconds(pgKeepAliveIdle)},
	{"tcp_keepalives_interval", seconds(pgKeepAliveEvery)},
	{"tcp_keepalives_count", strconv.Itoa(pgKeepAliveProbes)},
	{"tcp_user_timeout", millis(pgTCPUserTimeout)},
}

// boundSQL sets each setting named in $1 to its value in $2 where nothing
// set it (its source is the built-in default): a bound set in the server's
// configuration, on the database or on the role is kept.
const boundSQL = `
SELECT set_config(b.name, b.value, false)
FROM unnest($1::text[], $2::text[]) AS b(name, value)
JOIN pg_settings s ON s.name = b.name
WHERE s.source = 'default'`

// boundPool bounds cfg's connections: TCP keepalives and a user timeout on
// the client's sockets, and, once each connects, the server-side settings
// nothing else set, unless DATABASE_URL names them (as parameters or
// in options). They are set after the connection is made rather than sent
// as startup parameters, so that a setting of the role or the database
// (ALTER ROLE ... SET) is kept, and so that a pooler that refuses unknown
// startup parameters (PgBouncer) lets the connection through.
func boundPool(cfg *pgxpool.Config) {
	params := cfg.ConnConfig.RuntimeParams
	var names, values []string
	for _, b := range pgBounds {
		if _, set := params[b[0]]; set || strings.Contains(params["options"], b[0]) {
			continue
		}
		names, values = append(names, b[0]), append(values, b[1])
	}
	if len(names) > 0 {
		next := cfg.AfterConnect
		cfg.AfterConnect = func(ctx context.Context, c *pgx.Conn) error {
			if _, err := c.Exec(ctx, boundSQL, names, values); err != nil {
				return fmt.Errorf("bound the session (%s): %w", strings.Join(names, ", "), err)
			}
			if next != nil {
				return next(ctx, c)
			}
			return nil
		}
	}
	d := &net.Dialer{
		KeepAliveConfig: net.KeepAliveConfig{Enable: true, Idle: pgKeepAliveIdle, Interval: pgKeepAliveEvery, Count: pgKeepAliveProbes},
		Control:         tcpUserTimeout(pgTCPUserTimeout),
	}
	cfg.ConnConfig.DialFunc = func(ctx context.Context, network, addr string) (net.Conn, error) {
		return d.DialContext(ctx, network, addr)
	}
}

func seconds(d time.Duration) string { return strconv.FormatInt(int64(d/time.Second), 10) }
func millis(d time.Duration) string  { return strconv.FormatInt(d.Milliseconds(), 10) }

// boundTemporal sets the gRPC keepalive of opts unless it is set, and
// shortens the wait between attempts to connect again: the SDK's own waits
// up to 10 s, which a worker cut off from Temporal would add to its
// return after the link heals.
func boundTemporal(opts *client.Options) {
	cp := grpc.ConnectParams{Backoff: backoff.DefaultConfig, MinConnectTimeout: temporalMinConnect}
	cp.Backoff.BaseDelay, cp.Backoff.MaxDelay = 200*time.Millisecond, temporalReconnectMax
	// First, so that the deployment's own dial options win.
	opts.ConnectionOptions.DialOptions = append([]grpc.DialOption{grpc.WithConnectParams(cp)}, opts.ConnectionOptions.DialOptions...)
	if opts.ConnectionOptions.KeepAliveTime == 0 {
		opts.ConnectionOptions.KeepAliveTime = temporalKeepAlive
	}
	if opts.ConnectionOptions.KeepAliveTimeout == 0 {
		opts.ConnectionOptions.KeepAliveTimeout = temporalKeepAliveTimeout
	}
}
