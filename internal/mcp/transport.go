package mcp

import (
	"context"
	"errors"
	"io"
	"net/http"
	"os"
	"os/exec"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	mcpsdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/oncerun/oncerun/internal/telemetry"
	"github.com/oncerun/oncerun/internal/untrusted"
)

// transport returns a new transport to the server: each connection needs
// its own (a process runs once).
func (s *server) transport() mcpsdk.Transport {
	if s.cfg.Transport == TransportHTTP {
		return &keyTransport{srv: s, inner: &mcpsdk.StreamableClientTransport{
			// The SDK and Go's client name the endpoint in their errors,
			// which end up in logs, a key's recorded failure and the run's
			// history: they are given it redacted, and the roundTripper
			// puts the credentials back on the requests to it.
			Endpoint:   untrusted.Redact(s.cfg.URL),
			HTTPClient: s.httpClient,
			// oncerun only calls: it needs no messages the server would
			// start.
			DisableStandaloneSSE: true,
			// A call's answer stream that breaks is an unknown outcome for
			// the paired read to settle, not worth seconds of resumption
			// attempts that most servers cannot serve.
			MaxRetries: -1,
		}}
	}
	cmd := exec.Command(s.cfg.Command, s.cfg.Args...)
	cmd.Env = s.childEnv()
	cmd.Stderr = s.opts.Stderr
	return &keyTransport{srv: s, inner: &stdioTransport{inner: &mcpsdk.CommandTransport{Command: cmd, TerminateDuration: 5 * time.Second}}}
}

// newHTTPClient is the client of an http server's requests, the SDK's and
// oncerun's own.
func (s *server) newHTTPClient() *http.Client {
	base := http.DefaultTransport.(*http.Transport).Clone()
	// Go's transport silently resends a request that carries an
	// Idempotency-Key when a reused connection drops, after the server may
	// have acted on it: a fresh connection per request keeps every send
	// visible to the classification (as the payments client does).
	base.DisableKeepAlives = true
	return &http.Client{Transport: telemetry.Transport(newRoundTripper(base, s.cfg.URL, s.bearer, s.cfg.IdempotencyKey.header()))}
}

// inheritedEnv is what a stdio server inherits of the worker's
// environment, as in the reference MCP clients: enough to run a program,
// none of the worker's secrets.
var inheritedEnv = []string{"HOME", "LOGNAME", "PATH", "SHELL", "TERM", "USER"}

func (s *server) childEnv() []string {
	var env []string
	for _, k := range inheritedEnv {
		if v, ok := s.opts.LookupEnv(k); ok {
			env = append(env, k+"="+v)
		}
	}
	for k, v := range s.cfg.Env {
		env = append(env, k+"="+v)
	}
	return env
}

// callState follows one tools/call request through the transport: whether
// any of it may have reached the server, and the HTTP status it was
// answered with.
type callState struct {
	key string
	// live is the call as live questions find it; nil for a probe's.
	live *liveCall
	// wantTask asks the server to run the call as a task; created is the
	// task it answered with, if any.
	wantTask bool
	created  atomic.Pointer[taskInfo]
	sent     atomic.Bool
	status   atomic.Int32
}

type callStateKey struct{}

func withCallState(ctx context.Context, st *callState) context.Context {
	return context.WithValue(ctx, callStateKey{}, st)
}

func callStateOf(ctx context.Context) *callState {
	st, _ := ctx.Value(callStateKey{}).(*callState)
	return st
}

// stdioTransport wraps the SDK's command transport to record whether a
// tools/call request was written to the server's standard input.
type stdioTransport struct {
	inner mcpsdk.Transport
}

func (t *stdioTransport) Connect(ctx context.Context) (mcpsdk.Connection, error) {
	c, err := t.inner.Connect(ctx)
	if err != nil {
		return nil, err
	}
	return &stdioConn{Connection: c}, nil
}

type stdioConn struct {
	mcpsdk.Connection
}

func (c *stdioConn) Write(ctx context.Context, msg jsonrpc.Message) error {
	err := c.Connection.Write(ctx, msg)
	if st := callStateOf(ctx); st != nil {
		if req, ok := msg.(*jsonrpc.Request); ok && req.Method == "tools/call" && (err == nil || !nothingWritten(ctx, err)) {
			st.sent.Store(true)
		}
	}
	return err
}

// nothingWritten reports whether a failed write to a server's standard
// input provably delivered nothing it could act on: the context ended
// before the write began, or the pipe had no reader (the process had
// exited or closed its input).
func nothingWritten(ctx context.Context, err error) bool {
	return (ctx.Err() != nil && errors.Is(err, ctx.Err())) ||
		errors.Is(err, syscall.EPIPE) || errors.Is(err, os.ErrClosed) || errors.Is(err, io.ErrClosedPipe)
}
