package chaos

import (
	"bufio"
	"io"
	"net"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// echoBackend is a TCP server that answers each line with its name and
// the line, until it is closed, which also closes its connections.
type echoBackend struct {
	name  string
	ln    net.Listener
	conns chan net.Conn
}

func startEcho(t *testing.T, name string) *echoBackend {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	b := &echoBackend{name: name, ln: ln, conns: make(chan net.Conn, 16)}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			b.conns <- c
			go func() {
				sc := bufio.NewScanner(c)
				for sc.Scan() {
					if _, err := io.WriteString(c, b.name+":"+sc.Text()+"\n"); err != nil {
						return
					}
				}
			}()
		}
	}()
	t.Cleanup(b.kill)
	return b
}

// kill closes the listener and every connection, as a process's death
// does.
func (b *echoBackend) kill() {
	_ = b.ln.Close()
	for {
		select {
		case c := <-b.conns:
			_ = c.Close()
		default:
			return
		}
	}
}

func ask(t *testing.T, c net.Conn, line string) (string, error) {
	t.Helper()
	require.NoError(t, c.SetDeadline(time.Now().Add(5*time.Second)))
	if _, err := io.WriteString(c, line+"\n"); err != nil {
		return "", err
	}
	return bufio.NewReader(c).ReadString('\n')
}

func TestForwarderSpreadsConnectionsAndSkipsDeadBackends(t *testing.T) {
	t.Parallel()
	a, b := startEcho(t, "a"), startEcho(t, "b")
	f, err := newForwarder("127.0.0.1:0", []string{a.ln.Addr().String(), b.ln.Addr().String()})
	require.NoError(t, err)
	t.Cleanup(func() { _ = f.Close() })

	seen := map[string]bool{}
	for range 2 {
		c, err := net.Dial("tcp", f.Addr())
		require.NoError(t, err)
		got, err := ask(t, c, "hi")
		require.NoError(t, err)
		seen[got] = true
		_ = c.Close()
	}
	assert.Equal(t, map[string]bool{"a:hi\n": true, "b:hi\n": true}, seen, "one connection to each backend in turn")

	// A connection to a backend that dies ends; the client's next
	// connections all reach the live one.
	c, err := net.Dial("tcp", f.Addr())
	require.NoError(t, err)
	got, err := ask(t, c, "before")
	require.NoError(t, err)
	dead, live := a, "b"
	if got[0] == 'b' {
		dead, live = b, "a"
	}
	dead.kill()
	_, err = ask(t, c, "after")
	assert.Error(t, err, "the dead backend's connection is closed")
	for range 3 {
		c, err := net.Dial("tcp", f.Addr())
		require.NoError(t, err)
		got, err := ask(t, c, "again")
		require.NoError(t, err)
		assert.Equal(t, live+":again\n", got)
		_ = c.Close()
	}
	joined := f.Joined()
	assert.Equal(t, 6, joined[0]+joined[1], "every connection was joined once")
}
