package netfault

import (
	"bufio"
	"errors"
	"net"
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// echo is a TCP server that writes back every line it reads.
func echo(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	t.Cleanup(func() { _ = ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				r := bufio.NewReader(c)
				for {
					line, err := r.ReadString('\n')
					if err != nil {
						return
					}
					if _, err := c.Write([]byte(line)); err != nil {
						return
					}
				}
			}()
		}
	}()
	return ln.Addr().String()
}

func proxy(t *testing.T) *Proxy {
	t.Helper()
	p, err := Listen("127.0.0.1:0", echo(t))
	require.NoError(t, err)
	t.Cleanup(func() { _ = p.Close() })
	return p
}

// roundTrip writes line on c and reads its echo within wait.
func roundTrip(c net.Conn, r *bufio.Reader, line string, wait time.Duration) (string, error) {
	if _, err := c.Write([]byte(line + "\n")); err != nil {
		return "", err
	}
	_ = c.SetReadDeadline(time.Now().Add(wait))
	got, err := r.ReadString('\n')
	if err != nil {
		return "", err
	}
	return got[:len(got)-1], nil
}

func dial(t *testing.T, p *Proxy) (net.Conn, *bufio.Reader) {
	t.Helper()
	c, err := net.Dial("tcp", p.Addr())
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close() })
	return c, bufio.NewReader(c)
}

func TestAHealthyProxyForwards(t *testing.T) {
	p := proxy(t)
	c, r := dial(t, p)
	got, err := roundTrip(c, r, "hello", 5*time.Second)
	require.NoError(t, err)
	assert.Equal(t, "hello", got)
	assert.Equal(t, 1, p.Conns())
}

// A black hole keeps the connection open and delivers nothing until it
// heals; then what was sent arrives, in order.
func TestABlackHoleHoldsBytesUntilItHeals(t *testing.T) {
	for _, d := range []Direction{Up, Down, Both} {
		t.Run(d.String(), func(t *testing.T) {
			p := proxy(t)
			c, r := dial(t, p)
			_, err := roundTrip(c, r, "before", 5*time.Second)
			require.NoError(t, err)

			p.Set(Fault{Hold: d})
			_, err = roundTrip(c, r, "during", 300*time.Millisecond)
			require.Error(t, err)
			assert.True(t, errors.Is(err, os.ErrDeadlineExceeded), "the connection stays open: %v", err)

			p.Heal()
			_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
			got, err := r.ReadString('\n')
			require.NoError(t, err)
			assert.Equal(t, "during\n", got)
		})
	}
}

func TestAConnectionOpenedIntoABlackHoleIsJoinedWhenItHeals(t *testing.T) {
	p := proxy(t)
	p.Set(Fault{Hold: Both})
	c, r := dial(t, p)
	_, err := roundTrip(c, r, "waiting", 300*time.Millisecond)
	require.ErrorIs(t, err, os.ErrDeadlineExceeded)
	p.Heal()
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	got, err := r.ReadString('\n')
	require.NoError(t, err)
	assert.Equal(t, "waiting\n", got)
}

func TestRefusedConnectionsAreReset(t *testing.T) {
	p := proxy(t)
	p.Set(Fault{Refuse: true})
	// The reset may come at the dial or at the first read.
	c, err := net.Dial("tcp", p.Addr())
	if err == nil {
		defer c.Close()
		_, err = roundTrip(c, bufio.NewReader(c), "x", 5*time.Second)
	}
	require.Error(t, err)
	assert.False(t, errors.Is(err, os.ErrDeadlineExceeded), "refused at once, not held: %v", err)

	p.Heal()
	c2, r2 := dial(t, p)
	got, err := roundTrip(c2, r2, "again", 5*time.Second)
	require.NoError(t, err)
	assert.Equal(t, "again", got)
}

func TestResetEndsEveryOpenConnection(t *testing.T) {
	p := proxy(t)
	c, r := dial(t, p)
	_, err := roundTrip(c, r, "x", 5*time.Second)
	require.NoError(t, err)
	assert.Equal(t, 1, p.Reset())
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	_, err = r.ReadString('\n')
	require.Error(t, err)
	assert.False(t, errors.Is(err, os.ErrDeadlineExceeded), "reset, not held: %v", err)
	require.Eventually(t, func() bool { return p.Conns() == 0 }, 5*time.Second, 10*time.Millisecond)
}

// Latency delays each chunk; order is kept whatever the jitter.
func TestLatencyDelaysAndKeepsOrder(t *testing.T) {
	p := proxy(t)
	p.Set(Fault{Latency: 150 * time.Millisecond, Jitter: 100 * time.Millisecond})
	c, r := dial(t, p)
	began := time.Now()
	for i := range 5 {
		_, err := c.Write([]byte{byte('a' + i), '\n'})
		require.NoError(t, err)
	}
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	var got string
	for range 5 {
		line, err := r.ReadString('\n')
		require.NoError(t, err)
		got += line[:1]
	}
	assert.Equal(t, "abcde", got)
	// Two crossings of at least 50 ms each: a floor, never a ceiling.
	assert.GreaterOrEqual(t, time.Since(began), 100*time.Millisecond)
}

func TestFaultsDescribeThemselves(t *testing.T) {
	assert.Equal(t, "healthy", Fault{}.String())
	assert.Equal(t, "black hole up, latency 1s±200ms, 1000 B/s, refuse",
		Fault{Hold: Up, Latency: time.Second, Jitter: 200 * time.Millisecond, Bandwidth: 1000, Refuse: true}.String())
}
