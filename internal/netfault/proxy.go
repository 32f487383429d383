package netfault

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"sync"
	"time"
)

// Direction names the ways bytes flow through a proxy.
type Direction uint8

// Directions: Up is from the client (the worker) to its destination, Down
// the answers.
const (
	Up Direction = 1 << iota
	Down
	Both = Up | Down
)

// String names d as the chaos report does.
func (d Direction) String() string {
	switch d {
	case 0:
		return "none"
	case Up:
		return "up"
	case Down:
		return "down"
	case Both:
		return "both"
	}
	return fmt.Sprintf("Direction(%d)", uint8(d))
}

// Fault is what a [Proxy] does to the bytes it forwards. The zero Fault is
// a healthy network.
type Fault struct {
	// Hold black-holes the directions it names: nothing is forwarded and
	// nothing is closed. New connections wait, accepted and not joined.
	Hold Direction
	// Latency delays each chunk of bytes, in both directions, by Latency
	// give or take up to Jitter. Order is kept.
	Latency, Jitter time.Duration
	// Bandwidth limits each direction of each connection to this many
	// bytes a second. Zero: no limit.
	Bandwidth int
	// Refuse resets new connections as soon as they are accepted.
	Refuse bool
}

// Healthy reports whether f is no fault at all.
func (f Fault) Healthy() bool { return f == Fault{} }

// String describes f for logs and reports.
func (f Fault) String() string {
	if f.Healthy() {
		return "healthy"
	}
	s := ""
	add := func(part string) {
		if s != "" {
			s += ", "
		}
		s += part
	}
	if f.Hold != 0 {
		add("black hole " + f.Hold.String())
	}
	if f.Latency > 0 || f.Jitter > 0 {
		add(fmt.Sprintf("latency %s±%s", f.Latency, f.Jitter))
	}
	if f.Bandwidth > 0 {
		add(fmt.Sprintf("%d B/s", f.Bandwidth))
	}
	if f.Refuse {
		add("refuse")
	}
	return s
}

// dialTimeout bounds the proxy's own dial of its destination.
const dialTimeout = 5 * time.Second

// Proxy accepts connections on one address and joins each to its target
// through the current [Fault].
type Proxy struct {
	ln     net.Listener
	target string

	mu    sync.Mutex
	fault Fault
	// changed is closed, and replaced, at each Set: whatever waits on the
	// fault looks again.
	changed chan struct{}
	conns   map[*pair]struct{}
	closed  bool
	wg      sync.WaitGroup
}

// Listen returns a proxy listening on addr ("127.0.0.1:0" picks a port)
// that forwards to target, healthy until [Proxy.Set].
func Listen(addr, target string) (*Proxy, error) {
	if target == "" {
		return nil, errors.New("netfault: the proxy's target is empty")
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("netfault: listen on %s: %w", addr, err)
	}
	p := &Proxy{ln: ln, target: target, changed: make(chan struct{}), conns: map[*pair]struct{}{}}
	p.wg.Go(p.serve)
	return p, nil
}

// Addr is the address the proxy's clients dial, host:port.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// Set makes f the fault of every connection, open or new.
func (p *Proxy) Set(f Fault) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.fault = f
	close(p.changed)
	p.changed = make(chan struct{})
}

// Heal removes the fault: bytes held flow again.
func (p *Proxy) Heal() { p.Set(Fault{}) }

// Conns is the number of connections open through the proxy.
func (p *Proxy) Conns() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.conns)
}

// Reset resets every connection open through the proxy (an RST to the
// client and to the destination) and returns how many it reset.
func (p *Proxy) Reset() int {
	p.mu.Lock()
	open := make([]*pair, 0, len(p.conns))
	for c := range p.conns {
		open = append(open, c)
	}
	p.mu.Unlock()
	for _, c := range open {
		c.reset()
	}
	return len(open)
}

// Close stops the proxy and closes every connection through it.
func (p *Proxy) Close() error {
	p.mu.Lock()
	p.closed = true
	open := make([]*pair, 0, len(p.conns))
	for c := range p.conns {
		open = append(open, c)
	}
	p.mu.Unlock()
	err := p.ln.Close()
	for _, c := range open {
		c.close()
	}
	p.Heal() // wakes whatever waits on a hold
	p.wg.Wait()
	return err
}

// now returns the fault and the channel closed at its next change.
func (p *Proxy) now() (Fault, <-chan struct{}, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.fault, p.changed, p.closed
}

// waitOpen waits until no fault holds the directions d names; false when
// the proxy or ctx closed meanwhile.
func (p *Proxy) waitOpen(ctx context.Context, d Direction) (Fault, bool) {
	for {
		f, changed, closed := p.now()
		if closed {
			return f, false
		}
		if f.Hold&d == 0 {
			return f, true
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return f, false
		}
	}
}

func (p *Proxy) serve() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			time.Sleep(10 * time.Millisecond)
			continue
		}
		p.wg.Go(func() { p.join(c) })
	}
}

// join joins the client c to a new connection to the target, once no fault
// holds or refuses it, and forwards until either side ends.
func (p *Proxy) join(c net.Conn) {
	pr := &pair{client: c}
	ctx, cancel := context.WithCancel(context.Background())
	pr.cancel = cancel
	defer cancel()
	if !p.track(pr) {
		resetConn(c)
		return
	}
	defer p.untrack(pr)
	if f, _, _ := p.now(); f.Refuse {
		pr.reset()
		return
	}
	// A connection opened into a black hole waits for it to heal.
	if _, ok := p.waitOpen(ctx, Both); !ok {
		pr.close()
		return
	}
	d := net.Dialer{Timeout: dialTimeout}
	s, err := d.DialContext(ctx, "tcp", p.target)
	if err != nil {
		pr.reset()
		return
	}
	if !pr.setServer(s) {
		_ = s.Close()
		return
	}
	var wg sync.WaitGroup
	wg.Go(func() { p.pump(ctx, Up, c, s); pr.close() })
	wg.Go(func() { p.pump(ctx, Down, s, c); pr.close() })
	wg.Wait()
}

func (p *Proxy) track(pr *pair) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return false
	}
	p.conns[pr] = struct{}{}
	return true
}

func (p *Proxy) untrack(pr *pair) {
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.conns, pr)
}

// chunk is bytes read from one side, due at the other no sooner than due.
type chunk struct {
	b   []byte
	due time.Time
}

// pump forwards from src to dst in direction d: a reader stamps each chunk
// with its delivery time, and a writer delivers it then, once no hold
// stops direction d, no faster than the bandwidth allows. The queue
// between them is short, so that a held direction soon stops reading and
// its sender's writes block, as on a real link.
func (p *Proxy) pump(ctx context.Context, d Direction, src, dst net.Conn) {
	queue := make(chan chunk, 8)
	go func() {
		defer close(queue)
		var last time.Time
		for {
			b := make([]byte, 32<<10)
			n, err := src.Read(b)
			if n > 0 {
				f, _, _ := p.now()
				due := time.Now().Add(delay(f))
				if due.Before(last) {
					due = last
				}
				last = due
				select {
				case queue <- chunk{b: b[:n], due: due}:
				case <-ctx.Done():
					return
				}
			}
			if err != nil {
				return
			}
		}
	}()
	for c := range queue {
		if wait := time.Until(c.due); wait > 0 {
			select {
			case <-time.After(wait):
			case <-ctx.Done():
				return
			}
		}
		f, ok := p.waitOpen(ctx, d)
		if !ok {
			return
		}
		if _, err := dst.Write(c.b); err != nil {
			return
		}
		if f.Bandwidth > 0 {
			select {
			case <-time.After(time.Duration(float64(len(c.b)) / float64(f.Bandwidth) * float64(time.Second))):
			case <-ctx.Done():
				return
			}
		}
	}
	// The source ended: pass the end on, as TCP does.
	if tc, ok := dst.(*net.TCPConn); ok {
		_ = tc.CloseWrite()
	} else {
		_ = dst.Close()
	}
}

// delay is one chunk's latency under f.
func delay(f Fault) time.Duration {
	d := f.Latency
	if f.Jitter > 0 {
		d += time.Duration(rand.Int64N(int64(2*f.Jitter)+1)) - f.Jitter
	}
	return max(d, 0)
}

// pair is a client's connection and, once joined, its destination's.
type pair struct {
	cancel context.CancelFunc

	mu     sync.Mutex
	client net.Conn
	server net.Conn
	ended  bool
}

func (pr *pair) setServer(s net.Conn) bool {
	pr.mu.Lock()
	defer pr.mu.Unlock()
	if pr.ended {
		return false
	}
	pr.server = s
	return true
}

// close ends both connections with a FIN.
func (pr *pair) close() { pr.end(false) }

// reset ends both connections with an RST.
func (pr *pair) reset() { pr.end(true) }

func (pr *pair) end(rst bool) {
	pr.mu.Lock()
	defer pr.mu.Unlock()
	if pr.ended {
		return
	}
	pr.ended = true
	pr.cancel()
	for _, c := range []net.Conn{pr.client, pr.server} {
		if c == nil {
			continue
		}
		if rst {
			resetConn(c)
		} else {
			_ = c.Close()
		}
	}
}

// resetConn closes c with an RST rather than a FIN.
func resetConn(c net.Conn) {
	if tc, ok := c.(*net.TCPConn); ok {
		_ = tc.SetLinger(0)
	}
	_ = c.Close()
}
