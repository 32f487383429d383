package httpserver

import (
	"cmp"
	"context"
	"log"
	"net"
	"net/http"
	"time"

	"golang.org/x/net/netutil"
)

// Defaults of [Config].
const (
	DefaultReadHeaderTimeout = 10 * time.Second
	DefaultReadTimeout       = 30 * time.Second
	DefaultWriteTimeout      = 60 * time.Second
	DefaultIdleTimeout       = 60 * time.Second
	DefaultMaxHeaderBytes    = 32 << 10
	DefaultMaxConnections    = 1024
)

// Config sets the limits of a [Server]. A field that is zero or negative
// takes its default, but for WriteTimeout, which a negative value turns off.
type Config struct {
	// ReadHeaderTimeout bounds reading a request's headers. Default
	// DefaultReadHeaderTimeout.
	ReadHeaderTimeout time.Duration
	// ReadTimeout bounds reading a whole request, its body included.
	// Default DefaultReadTimeout.
	ReadTimeout time.Duration
	// WriteTimeout bounds writing a response, counted from the end of its
	// request's headers. Default DefaultWriteTimeout; negative for none,
	// for a server whose responses stream (MCP over Streamable HTTP) or
	// are held back on purpose (a sandbox's delays).
	WriteTimeout time.Duration
	// IdleTimeout is how long a keep-alive connection may wait for its
	// next request before it is closed. Default DefaultIdleTimeout.
	IdleTimeout time.Duration
	// MaxHeaderBytes bounds a request's header lines; a larger request is
	// answered 431 Request Header Fields Too Large. Default
	// DefaultMaxHeaderBytes.
	MaxHeaderBytes int
	// MaxConnections caps the connections open at once, idle keep-alive
	// connections included. A connection beyond the cap waits in the
	// kernel's accept queue until one closes. Default
	// DefaultMaxConnections.
	MaxConnections int
	// ErrorLog receives the server's own errors (a failed TLS handshake, a
	// handler's panic). Default: the log package's standard logger.
	ErrorLog *log.Logger
}

// WithDefaults returns c with every field that is zero or negative set to
// its default, but for a negative WriteTimeout.
func (c Config) WithDefaults() Config {
	orDefault := func(d, def time.Duration) time.Duration {
		if d <= 0 {
			return def
		}
		return d
	}
	c.ReadHeaderTimeout = orDefault(c.ReadHeaderTimeout, DefaultReadHeaderTimeout)
	c.ReadTimeout = orDefault(c.ReadTimeout, DefaultReadTimeout)
	c.WriteTimeout = cmp.Or(c.WriteTimeout, DefaultWriteTimeout)
	c.IdleTimeout = orDefault(c.IdleTimeout, DefaultIdleTimeout)
	c.MaxHeaderBytes = cmp.Or(max(c.MaxHeaderBytes, 0), DefaultMaxHeaderBytes)
	c.MaxConnections = cmp.Or(max(c.MaxConnections, 0), DefaultMaxConnections)
	return c
}

// Server is an HTTP server with the limits of its Config.
type Server struct {
	hs       *http.Server
	maxConns int
}

// New returns a server that answers with h, within cfg's limits.
func New(h http.Handler, cfg Config) *Server {
	cfg = cfg.WithDefaults()
	hs := &http.Server{
		Handler:           h,
		ReadHeaderTimeout: cfg.ReadHeaderTimeout,
		ReadTimeout:       cfg.ReadTimeout,
		IdleTimeout:       cfg.IdleTimeout,
		MaxHeaderBytes:    cfg.MaxHeaderBytes,
		ErrorLog:          cfg.ErrorLog,
	}
	if cfg.WriteTimeout > 0 {
		hs.WriteTimeout = cfg.WriteTimeout
	}
	return &Server{hs: hs, maxConns: cfg.MaxConnections}
}

// Serve accepts connections on ln, at most MaxConnections open at once,
// and serves them until Shutdown or Close; it returns as
// [http.Server.Serve] does (http.ErrServerClosed after Shutdown or Close).
func (s *Server) Serve(ln net.Listener) error {
	return s.hs.Serve(netutil.LimitListener(ln, s.maxConns))
}

// Shutdown stops accepting connections and waits, until ctx ends, for
// the requests being answered (see [http.Server.Shutdown]).
func (s *Server) Shutdown(ctx context.Context) error { return s.hs.Shutdown(ctx) }

// Close closes the listener and every connection at once.
func (s *Server) Close() error { return s.hs.Close() }
