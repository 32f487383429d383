package chaos

import (
	"errors"
	"io"
	"net"
	"sync"
	"time"
)

// forwarder is a TCP load balancer of the simplest kind, as a production
// cluster has in front of its frontends: it accepts connections on one
// address and joins each to a backend, the next in turn, trying the others
// when a backend refuses. It knows nothing of gRPC: a client's connection
// lives as long as its backend's, and when a backend dies its connections
// are closed, so that clients connect again and land on a live one.
type forwarder struct {
	ln       net.Listener
	backends []string

	mu    sync.Mutex
	next  int
	conns map[net.Conn]struct{}
	// joined counts the connections joined to each backend.
	joined []int
	closed bool
	wg     sync.WaitGroup
}

// forwardDialTimeout bounds a dial to one backend; a backend that does not
// answer in time is skipped.
const forwardDialTimeout = 2 * time.Second

// newForwarder listens on addr and forwards to backends.
func newForwarder(addr string, backends []string) (*forwarder, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	f := &forwarder{ln: ln, backends: backends, conns: map[net.Conn]struct{}{}, joined: make([]int, len(backends))}
	f.wg.Go(f.serve)
	return f, nil
}

// Addr is the address clients connect to.
func (f *forwarder) Addr() string { return f.ln.Addr().String() }

func (f *forwarder) serve() {
	for {
		c, err := f.ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			time.Sleep(10 * time.Millisecond)
			continue
		}
		f.wg.Go(func() { f.join(c) })
	}
}

// join connects c to the first backend that answers, from the next in
// turn, and copies both ways until either side closes.
func (f *forwarder) join(c net.Conn) {
	f.mu.Lock()
	first := f.next
	f.next = (f.next + 1) % len(f.backends)
	f.mu.Unlock()
	var (
		b   net.Conn
		err error
	)
	for i := range f.backends {
		n := (first + i) % len(f.backends)
		if b, err = net.DialTimeout("tcp", f.backends[n], forwardDialTimeout); err == nil {
			f.mu.Lock()
			f.joined[n]++
			f.mu.Unlock()
			break
		}
	}
	if err != nil {
		_ = c.Close() // no backend: the client sees its connection fail
		return
	}
	if !f.track(c, b) {
		return
	}
	done := make(chan struct{}, 2)
	pipe := func(dst, src net.Conn) {
		_, _ = io.Copy(dst, src)
		done <- struct{}{}
	}
	go pipe(b, c)
	go pipe(c, b)
	<-done
	// One side is gone: end both, so that the client sees its backend's
	// death as its own connection's.
	_ = c.Close()
	_ = b.Close()
	<-done
	f.mu.Lock()
	delete(f.conns, c)
	delete(f.conns, b)
	f.mu.Unlock()
}

// track records a joined pair, or closes it if the forwarder is closed.
func (f *forwarder) track(c, b net.Conn) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed {
		_ = c.Close()
		_ = b.Close()
		return false
	}
	f.conns[c], f.conns[b] = struct{}{}, struct{}{}
	return true
}

// Joined is how many connections were joined to each backend.
func (f *forwarder) Joined() []int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]int(nil), f.joined...)
}

// Close stops accepting, closes every connection and waits for the
// forwarder's goroutines.
func (f *forwarder) Close() error {
	err := f.ln.Close()
	f.mu.Lock()
	f.closed = true
	for c := range f.conns {
		_ = c.Close()
	}
	f.mu.Unlock()
	f.wg.Wait()
	return err
}
