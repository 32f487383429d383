package httpserver

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// serve serves a handler that answers "ok" with cfg's limits on a free
// loopback port, and returns its address.
func serve(t *testing.T, cfg Config) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	s := New(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "ok") }), cfg)
	done := make(chan error, 1)
	go func() { done <- s.Serve(ln) }()
	t.Cleanup(func() {
		_ = s.Close()
		require.ErrorIs(t, <-done, http.ErrServerClosed)
	})
	return ln.Addr().String()
}

// conn is a keep-alive client connection that sends requests by hand.
type conn struct {
	t *testing.T
	net.Conn
	r *bufio.Reader
}

func dial(t *testing.T, addr string) *conn {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close() })
	return &conn{t: t, Conn: c, r: bufio.NewReader(c)}
}

// send writes a GET request with the given extra header lines.
func (c *conn) send(headers ...string) {
	c.t.Helper()
	req := "GET / HTTP/1.1\r\nHost: test\r\n" + strings.Join(headers, "") + "\r\n"
	_, err := io.WriteString(c, req)
	require.NoError(c.t, err)
}

// answer reads a response, waiting at most within; it returns its status,
// or an error when none came. The body is read to its end, or until the
// server closes the connection (it does after a 431).
func (c *conn) answer(within time.Duration) (int, error) {
	c.t.Helper()
	require.NoError(c.t, c.SetReadDeadline(time.Now().Add(within)))
	resp, err := http.ReadResponse(c.r, nil)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, resp.Body)
	return resp.StatusCode, nil
}

func TestNewSetsTheDefaults(t *testing.T) {
	t.Parallel()
	s := New(http.NotFoundHandler(), Config{})
	assert.Equal(t, DefaultReadHeaderTimeout, s.hs.ReadHeaderTimeout)
	assert.Equal(t, DefaultReadTimeout, s.hs.ReadTimeout)
	assert.Equal(t, DefaultWriteTimeout, s.hs.WriteTimeout)
	assert.Equal(t, DefaultIdleTimeout, s.hs.IdleTimeout)
	assert.Equal(t, DefaultMaxHeaderBytes, s.hs.MaxHeaderBytes)
	assert.Equal(t, DefaultMaxConnections, s.maxConns)

	streaming := New(http.NotFoundHandler(), Config{WriteTimeout: -1})
	assert.Zero(t, streaming.hs.WriteTimeout, "a negative WriteTimeout turns it off")
}

func TestIdleConnectionIsClosedAfterTheIdleTimeout(t *testing.T) {
	t.Parallel()
	addr := serve(t, Config{IdleTimeout: 200 * time.Millisecond})
	c := dial(t, addr)
	c.send()
	status, err := c.answer(10 * time.Second)
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, status)

	// The connection stays open for another request, until it has been
	// idle for the timeout: then the server closes it.
	require.NoError(t, c.SetReadDeadline(time.Now().Add(10*time.Second)))
	_, err = c.r.ReadByte()
	assert.ErrorIs(t, err, io.EOF, "the server closed the idle connection (not the client's deadline)")
}

func TestHeadersAreReadWithinTheReadHeaderTimeout(t *testing.T) {
	t.Parallel()
	addr := serve(t, Config{ReadHeaderTimeout: 200 * time.Millisecond})
	c := dial(t, addr)
	_, err := io.WriteString(c, "GET / HTTP/1.1\r\nHost: test\r\n")
	require.NoError(t, err)

	require.NoError(t, c.SetReadDeadline(time.Now().Add(10*time.Second)))
	_, err = c.r.ReadByte()
	assert.ErrorIs(t, err, io.EOF, "the server closed a connection whose headers never ended")
}

func TestConnectionBeyondTheCapWaitsUntilOneCloses(t *testing.T) {
	t.Parallel()
	addr := serve(t, Config{MaxConnections: 2})
	first, second := dial(t, addr), dial(t, addr)
	for _, c := range []*conn{first, second} {
		c.send()
		status, err := c.answer(10 * time.Second)
		require.NoError(t, err)
		require.Equal(t, http.StatusOK, status)
	}

	// Both connections stay open (keep-alive): a third is connected by the
	// kernel but not served.
	third := dial(t, addr)
	third.send()
	_, err := third.answer(500 * time.Millisecond)
	require.ErrorIs(t, err, os.ErrDeadlineExceeded, "a connection beyond the cap is not served")

	require.NoError(t, first.Close())
	status, err := third.answer(10 * time.Second)
	require.NoError(t, err, "served once a connection closed")
	assert.Equal(t, http.StatusOK, status)
}

func TestHeadersLargerThanMaxHeaderBytesAreRefused(t *testing.T) {
	t.Parallel()
	addr := serve(t, Config{MaxHeaderBytes: 1 << 10})
	tests := []struct {
		name   string
		header int
		want   int
	}{
		{"within the limit", 512, http.StatusOK},
		// net/http allows 4,096 bytes over MaxHeaderBytes for the request
		// line and its own reading.
		{"beyond the limit", 16 << 10, http.StatusRequestHeaderFieldsTooLarge},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			c := dial(t, addr)
			c.send("X-Big: " + strings.Repeat("a", tt.header) + "\r\n")
			status, err := c.answer(10 * time.Second)
			require.NoError(t, err)
			assert.Equal(t, tt.want, status)
		})
	}
}

func TestShutdownEndsServe(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	s := New(http.NotFoundHandler(), Config{})
	done := make(chan error, 1)
	go func() { done <- s.Serve(ln) }()
	require.NoError(t, s.Shutdown(context.Background()))
	err = <-done
	assert.True(t, errors.Is(err, http.ErrServerClosed), "Serve returned %v", err)
}
