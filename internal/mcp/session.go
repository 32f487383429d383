package mcp

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os/exec"
	"sync"
	"sync/atomic"

	mcpsdk "github.com/modelcontextprotocol/go-sdk/mcp"
	"go.uber.org/zap"

	"github.com/oncerun/oncerun/internal/untrusted"
)

// errClosed is what a tool of a closed [Discovered] answers.
var errClosed = errors.New("the MCP connections were closed")

// server is one configured MCP server and its current session. A session
// found to have ended (the server restarted, the process exited) when a
// call could not be sent on it is replaced, and the call sent on the new
// one (see server.call).
type server struct {
	cfg    ServerConfig
	opts   Options
	client *mcpsdk.Client
	// bearer is the token sent to an http server, read once at Load.
	bearer string
	// declared says the server has declared the tools.idempotency
	// capability (SEP-3182) in a handshake since the worker started.
	declared atomic.Bool
	// calls are the calls in flight, by their liveCall's id, for the live
	// questions the server asks in them.
	calls sync.Map
	// declaresTasks says the server declared task support for tools/call
	// (tasks.requests.tools.call); taskSupport holds each tool's
	// execution.taskSupport, read from the raw tools/list answers.
	declaresTasks atomic.Bool
	taskSupport   sync.Map
	// conn is the current session's connection, on which oncerun sends the
	// task requests the SDK has no method for (over stdio).
	conn atomic.Pointer[keyConn]
	// httpClient sends the requests oncerun posts itself to an http
	// server (a task's, to the session that created it).
	httpClient *http.Client
	// unfinished counts the tasks this worker created that are not known
	// to have ended (see unfinishedTask).
	unfinished atomic.Int64

	mu     sync.Mutex
	cs     *mcpsdk.ClientSession
	closed bool
	// closing tracks sessions being closed in the background, for Close
	// to wait on.
	closing sync.WaitGroup
}

func newServer(cfg ServerConfig, opts Options) (*server, error) {
	s := &server{cfg: cfg, opts: opts}
	// A server's question in a call's answer (an input-required result)
	// comes back to the call, which hands it to the step (see runner): the
	// SDK does not answer it. A question asked over the live session goes
	// to elicit, when the configuration takes live questions.
	copts := &mcpsdk.ClientOptions{MultiRoundTrip: &mcpsdk.MultiRoundTripOptions{Disabled: true}}
	if s.asksLive() {
		copts.ElicitationHandler = s.elicit
	}
	s.client = mcpsdk.NewClient(&mcpsdk.Implementation{Name: "oncerun", Version: "v1"}, copts)
	if cfg.Transport == TransportStdio {
		if err := forbidInspection(); err != nil {
			return nil, fmt.Errorf("keep the worker's environment and memory from its stdio servers: %w", err)
		}
	}
	if cfg.BearerTokenEnv != "" {
		tok, ok := opts.LookupEnv(cfg.BearerTokenEnv)
		if !ok || tok == "" {
			return nil, fmt.Errorf("bearer_token_env: %s is not set", cfg.BearerTokenEnv)
		}
		s.bearer = tok
	}
	if cfg.Transport == TransportHTTP {
		s.httpClient = s.newHTTPClient()
	}
	return s, nil
}

// describe names the server and where it is, for errors and logs: the
// URL redacted (untrusted.Redact), as every error that names it ends up in
// a key's recorded failure and the run's Temporal history.
func (s *server) describe() string {
	if s.cfg.Transport == TransportHTTP {
		return fmt.Sprintf("MCP server %s (http %s)", s.cfg.Name, untrusted.Redact(s.cfg.URL))
	}
	return fmt.Sprintf("MCP server %s (stdio %s)", s.cfg.Name, s.cfg.Command)
}

// session returns the current session, connecting first when there is
// none. The handshake is bounded by the connect timeout and by ctx, whose
// values the session does not keep: it outlives the call that opened it.
func (s *server) session(ctx context.Context) (*mcpsdk.ClientSession, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil, errClosed
	}
	if s.cs != nil {
		return s.cs, nil
	}
	cctx, cancel := context.WithTimeout(context.Background(), s.opts.ConnectTimeout)
	defer cancel()
	stop := context.AfterFunc(ctx, cancel)
	defer stop()
	cs, err := s.client.Connect(cctx, s.transport(), nil)
	if err != nil {
		if ctx.Err() != nil {
			err = fmt.Errorf("%w (%w)", err, context.Cause(ctx))
		}
		return nil, fmt.Errorf("connect to %s: %w", s.describe(), err)
	}
	s.cs = cs
	return cs, nil
}

// drop forgets cs, on which a call failed because of the session, if it is
// still the current session, so that the next call connects anew.
func (s *server) drop(cs *mcpsdk.ClientSession, why error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cs == cs {
		s.opts.Log.Info("mcp session lost; connecting again", zap.String("server", s.cfg.Name), zap.Error(why))
		s.closeInBackground(cs)
		s.cs = nil
	}
}

// closeInBackground closes a session without holding up the caller: closing
// waits for the server (a DELETE over http, the process's exit over stdio).
func (s *server) closeInBackground(cs *mcpsdk.ClientSession) {
	if s.keepsTasks() {
		return
	}
	s.closing.Go(func() { _ = cs.Close() })
}

// keepsTasks reports whether the http server's session must stay open,
// not closed: a task of this worker's may not have ended, and the next
// worker follows it in the session that created it.
func (s *server) keepsTasks() bool {
	if s.cfg.Transport != TransportHTTP || s.unfinished.Load() == 0 {
		return false
	}
	s.opts.Log.Info("MCP session left open: a task made in it may not have ended, and the next worker follows it there",
		zap.String("server", s.cfg.Name), zap.Int64("tasks", s.unfinished.Load()))
	return true
}

// close ends the session and refuses further calls.
func (s *server) close() error {
	s.mu.Lock()
	cs := s.cs
	s.cs, s.closed = nil, true
	s.mu.Unlock()
	var err error
	if cs != nil && !s.keepsTasks() {
		err = cs.Close()
		if exit := (*exec.ExitError)(nil); errors.As(err, &exit) {
			// How a stdio server's process exited, perhaps long before,
			// is no failure to close it.
			err = nil
		}
	}
	s.closing.Wait()
	if err != nil {
		return fmt.Errorf("close %s: %w", s.describe(), err)
	}
	return nil
}
