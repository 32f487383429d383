package worker

import (
	"context"
	"net"
	"path/filepath"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"
)

// The pool's dialer bounds TCP sockets and still reaches a server on a
// Unix socket (host=/var/run/postgresql), which has no TCP options.
func TestThePoolsDialerReachesAUnixSocket(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), ".s.PGSQL.5432")
	ln, err := net.Listen("unix", path)
	require.NoError(t, err)
	defer ln.Close()
	go func() {
		if c, err := ln.Accept(); err == nil {
			_ = c.Close()
		}
	}()
	cfg, err := pgxpool.ParseConfig("postgres://postgres@127.0.0.1:5432/postgres")
	require.NoError(t, err)
	boundPool(cfg)
	c, err := cfg.ConnConfig.DialFunc(context.Background(), "unix", path)
	require.NoError(t, err)
	require.NoError(t, c.Close())
}
