package payments

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/oncerun/oncerun/internal/httpserver"
)

// shutdownGrace is how long Close waits for requests being answered.
const shutdownGrace = 5 * time.Second

// Running is a Server listening on a TCP address. The Server's methods
// (SeedPayment, Refunds, SetFault, ...) are available on it.
type Running struct {
	*Server

	ln   net.Listener
	hs   *httpserver.Server
	done chan struct{} // closed when Serve has returned
	err  error         // Serve's error, other than http.ErrServerClosed

	closeOnce sync.Once
	closeErr  error
}

// Start builds a Server from cfg with New and serves it on cfg.Addr until
// ctx is done or Close is called. Use Addr "127.0.0.1:0" for a free port and
// URL to learn it.
func Start(ctx context.Context, cfg Config) (*Running, error) {
	srv, err := New(cfg)
	if err != nil {
		return nil, err
	}
	var lc net.ListenConfig
	ln, err := lc.Listen(ctx, "tcp", srv.cfg.Addr)
	if err != nil {
		return nil, fmt.Errorf("listen on %s: %w", srv.cfg.Addr, err)
	}
	r := &Running{
		Server: srv,
		ln:     ln,
		// The limits of every server of oncerun, but for the write
		// deadline: a delay fault holds an answer back for as long as it
		// says, so that clients meet their own timeouts.
		hs:   httpserver.New(srv.Handler(), httpserver.Config{WriteTimeout: -1}),
		done: make(chan struct{}),
	}
	go func() {
		defer close(r.done)
		if err := r.hs.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
			r.err = fmt.Errorf("serve sandbox payments: %w", err)
		}
	}()
	context.AfterFunc(ctx, func() { _ = r.Close() })
	return r, nil
}

// URL returns the base URL the server answers on, such as
// "http://127.0.0.1:8099".
func (r *Running) URL() string { return "http://" + r.ln.Addr().String() }

// Addr returns the address the server listens on.
func (r *Running) Addr() string { return r.ln.Addr().String() }

// Done is closed when the server has stopped serving.
func (r *Running) Done() <-chan struct{} { return r.done }

// Close stops the server: delayed requests end with 503 and nothing
// applied, requests being answered get up to five seconds, then every
// connection is closed. It returns the error that stopped serving, if any
// other than Close itself, and is safe to call more than once.
func (r *Running) Close() error {
	r.closeOnce.Do(func() {
		r.stop()
		ctx, cancel := context.WithTimeout(context.Background(), shutdownGrace)
		defer cancel()
		if err := r.hs.Shutdown(ctx); err != nil {
			_ = r.hs.Close()
		}
		<-r.done
		r.closeErr = r.err
	})
	return r.closeErr
}
