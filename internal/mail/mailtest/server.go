package mailtest

import (
	"cmp"
	"crypto/tls"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/emersion/go-smtp"
)

// Config configures a [Server].
type Config struct {
	// Addr is the address to listen on. Default "127.0.0.1:0", a free
	// loopback port; read it back with Server.Addr.
	Addr string

	// Domain is the name in the server's greeting. Default "localhost".
	Domain string

	// Username and Password, when Username is set, are the only credentials
	// accepted, and MAIL FROM is refused before AUTH.
	Username string
	Password string

	// AllowInsecureAuth offers AUTH over plaintext connections.
	AllowInsecureAuth bool

	// TLSConfig, when set, makes the server offer STARTTLS with it.
	TLSConfig *tls.Config

	// Timeout bounds each read and write on a connection. Default one
	// minute.
	Timeout time.Duration
}

// Server is a running SMTP server with an in-memory mailbox. Its methods are
// safe for concurrent use.
type Server struct {
	cfg   Config
	smtp  *smtp.Server
	ln    net.Listener
	conns atomic.Int64
	done  chan struct{} // closed when Serve returns
	quit  chan struct{} // closed by Close, ends stalled replies
	once  sync.Once

	mu       sync.Mutex
	messages []Received
	faults   faults
}

// faults counts how many more commands each fault applies to.
type faults struct {
	rejectRcpt       int
	rejectData       int
	dropAfterAccept  int
	dropAfterReply   int
	stallAfterAccept int
}

// Start listens on cfg.Addr and serves SMTP until Close.
func Start(cfg Config) (*Server, error) {
	cfg.Addr = cmp.Or(cfg.Addr, "127.0.0.1:0")
	cfg.Domain = cmp.Or(cfg.Domain, "localhost")
	cfg.Timeout = cmp.Or(cfg.Timeout, time.Minute)
	ln, err := net.Listen("tcp", cfg.Addr)
	if err != nil {
		return nil, fmt.Errorf("mailtest: listen %s: %w", cfg.Addr, err)
	}
	s := &Server{cfg: cfg, ln: ln, done: make(chan struct{}), quit: make(chan struct{})}
	s.smtp = smtp.NewServer(smtp.BackendFunc(s.newSession))
	s.smtp.Domain = cfg.Domain
	s.smtp.AllowInsecureAuth = cfg.AllowInsecureAuth
	s.smtp.TLSConfig = cfg.TLSConfig
	s.smtp.ReadTimeout = cfg.Timeout
	s.smtp.WriteTimeout = cfg.Timeout
	s.smtp.MaxMessageBytes = 10 << 20
	s.smtp.MaxRecipients = 100
	go func() {
		defer close(s.done)
		_ = s.smtp.Serve(countingListener{Listener: ln, n: &s.conns})
	}()
	return s, nil
}

// Addr returns the host:port the server listens on.
func (s *Server) Addr() string {
	return s.ln.Addr().String()
}

// Connections returns how many connections the server has accepted.
func (s *Server) Connections() int {
	return int(s.conns.Load())
}

// Messages returns the accepted messages in arrival order. The slice is a
// copy; the Received values share their Data and To with the mailbox and
// must not be modified.
func (s *Server) Messages() []Received {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Received(nil), s.messages...)
}

// RejectRcpt makes the server refuse the next n RCPT TO commands with 550.
func (s *Server) RejectRcpt(n int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.faults.rejectRcpt = n
}

// RejectData makes the server answer the end of the next n DATA commands
// with 554, storing nothing.
func (s *Server) RejectData(n int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.faults.rejectData = n
}

// DropAfterAccept makes the server store the next n messages and then close
// the connection before the 250 reply to DATA.
func (s *Server) DropAfterAccept(n int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.faults.dropAfterAccept = n
}

// DropAfterReply makes the server store the next n messages, send the 250
// reply to DATA and then close the connection.
func (s *Server) DropAfterReply(n int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.faults.dropAfterReply = n
}

// StallAfterAccept makes the server store the next n messages and withhold
// the reply to DATA until the server closes or Config.Timeout passes.
func (s *Server) StallAfterAccept(n int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.faults.stallAfterAccept = n
}

// Close stops the server and closes open connections. The mailbox stays
// readable. Close may be called more than once.
func (s *Server) Close() error {
	var err error
	s.once.Do(func() {
		close(s.quit)
		err = s.smtp.Close()
		// Serve may not have registered the listener with go-smtp yet.
		_ = s.ln.Close()
		<-s.done
	})
	if err != nil {
		return fmt.Errorf("mailtest: close: %w", err)
	}
	return nil
}

// take consumes one use of the fault that n points to and reports whether it
// applied. The caller holds s.mu.
func take(n *int) bool {
	if *n <= 0 {
		return false
	}
	*n--
	return true
}

// countingListener counts accepted connections.
type countingListener struct {
	net.Listener
	n *atomic.Int64
}

// Accept implements net.Listener.
func (l countingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err == nil {
		l.n.Add(1)
	}
	return c, err
}
