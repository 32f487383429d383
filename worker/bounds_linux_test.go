package worker_test

import (
	"context"
	"net"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/oncerun/oncerun/internal/pgtest"
	"github.com/oncerun/oncerun/worker"
)

// show returns a setting of the session of one of pool's connections.
func show(t *testing.T, url, setting string) string {
	t.Helper()
	pool, err := worker.NewPool(context.Background(), url)
	require.NoError(t, err)
	defer pool.Close()
	var v string
	require.NoError(t, pool.QueryRow(context.Background(), "SELECT current_setting($1)", setting).Scan(&v))
	return v
}

// Every connection of a worker's pool is bounded on the server's side,
// unless DATABASE_URL says otherwise, and on the client's.
func TestEveryConnectionOfThePoolIsBounded(t *testing.T) {
	t.Parallel()
	url := pgtest.ServerURL()
	for setting, want := range map[string]string{
		"statement_timeout":                   "1min",
		"idle_in_transaction_session_timeout": "15s",
		"tcp_user_timeout":                    "15000",
		"tcp_keepalives_idle":                 "5",
	} {
		assert.Equal(t, want, show(t, url, setting), setting)
	}
	// A setting of the database is kept.
	db := pgtest.NewDB(t)
	admin, err := worker.NewPool(context.Background(), url)
	require.NoError(t, err)
	_, err = admin.Exec(context.Background(), "ALTER DATABASE "+pgx.Identifier{db.Name}.Sanitize()+" SET idle_in_transaction_session_timeout = '7s'")
	admin.Close()
	require.NoError(t, err)
	assert.Equal(t, "7s", show(t, db.URL, "idle_in_transaction_session_timeout"))
	assert.Equal(t, "1min", show(t, db.URL, "statement_timeout"))
	// A URL's own setting is kept.
	assert.Equal(t, "0", show(t, url+map[bool]string{true: "&", false: "?"}[strings.Contains(url, "?")]+"statement_timeout=0", "statement_timeout"))

	pool, err := worker.NewPool(context.Background(), url)
	require.NoError(t, err)
	defer pool.Close()
	c, err := pool.Acquire(context.Background())
	require.NoError(t, err)
	defer c.Release()
	tcp, ok := c.Conn().PgConn().Conn().(*net.TCPConn)
	require.True(t, ok, "a TCP connection")
	raw, err := tcp.SyscallConn()
	require.NoError(t, err)
	var userTimeout, keepAlive int
	require.NoError(t, raw.Control(func(fd uintptr) {
		userTimeout, _ = unix.GetsockoptInt(int(fd), unix.IPPROTO_TCP, unix.TCP_USER_TIMEOUT)
		keepAlive, _ = unix.GetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_KEEPALIVE)
	}))
	assert.Equal(t, 15000, userTimeout, "TCP_USER_TIMEOUT in ms")
	assert.Equal(t, 1, keepAlive, "SO_KEEPALIVE")
}
