package worker_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	mcpsdk "github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.temporal.io/api/workflowservice/v1"
	"go.uber.org/zap"
	"google.golang.org/grpc"

	"github.com/oncerun/oncerun/internal/pgtest"
	"github.com/oncerun/oncerun/internal/sandbox/desk"
	"github.com/oncerun/oncerun/worker"
)

// frontend is a gRPC server of Temporal's WorkflowService that counts the
// connections it accepted and those still open. Temporal's client takes a
// server that does not know GetSystemInfo for an old one, so a dial
// succeeds; a worker's polls fail and are tried again.
type frontend struct {
	net.Listener
	addr             string
	accepted, opened atomic.Int64
}

// schedulesOnly implements only the creation of schedules, which a worker
// needs to serve.
type schedulesOnly struct {
	workflowservice.UnimplementedWorkflowServiceServer
}

func (schedulesOnly) CreateSchedule(context.Context, *workflowservice.CreateScheduleRequest) (*workflowservice.CreateScheduleResponse, error) {
	return &workflowservice.CreateScheduleResponse{}, nil
}

func newFrontend(t *testing.T, svc workflowservice.WorkflowServiceServer) *frontend {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	f := &frontend{Listener: ln, addr: ln.Addr().String()}
	s := grpc.NewServer()
	workflowservice.RegisterWorkflowServiceServer(s, svc)
	go func() { _ = s.Serve(f) }()
	t.Cleanup(s.Stop)
	return f
}

func (f *frontend) Accept() (net.Conn, error) {
	c, err := f.Listener.Accept()
	if err != nil {
		return nil, err
	}
	f.accepted.Add(1)
	f.opened.Add(1)
	return &countedConn{Conn: c, open: &f.opened}, nil
}

// open is how many connections of Temporal's clients are open.
func (f *frontend) open() int64 { return f.opened.Load() }

type countedConn struct {
	net.Conn
	open *atomic.Int64
	once sync.Once
}

func (c *countedConn) Close() error {
	c.once.Do(func() { c.open.Add(-1) })
	return c.Conn.Close()
}

// mcpServer serves a sandbox desk over Streamable HTTP and writes an MCP
// configuration that lists its open_ticket and find_ticket; sessions counts
// the sessions the desk has open.
func mcpServer(t *testing.T) (config string, sessions func() int) {
	t.Helper()
	d, err := desk.New(desk.Config{})
	require.NoError(t, err)
	server := d.Server()
	hs := httptest.NewServer(mcpsdk.NewStreamableHTTPHandler(func(*http.Request) *mcpsdk.Server { return server }, nil))
	t.Cleanup(hs.Close)
	raw, err := json.Marshal(map[string]any{"servers": []any{map[string]any{
		"name": "desk", "transport": "http", "url": hs.URL,
		"tools": map[string]any{
			"open_ticket": map[string]any{"idempotent": true, "paired_read": "find_ticket"},
			"find_ticket": map[string]any{"class": "read"},
		},
	}}})
	require.NoError(t, err)
	config = filepath.Join(t.TempDir(), "mcp.json")
	require.NoError(t, os.WriteFile(config, raw, 0o600))
	return config, func() int {
		n := 0
		for range server.Sessions() {
			n++
		}
		return n
	}
}

// processSetup is what a Build of a test needs: a Temporal frontend, a
// migrated database of the test's own, an MCP server, and a configuration
// that reaches all three.
type processSetup struct {
	temporal *frontend
	db       pgtest.DB
	sessions func() int
	// observer is a pool on another database, that counts the database's
	// connections.
	observer *pgxpool.Pool
	cfg      worker.Config
}

func setupProcess(t *testing.T) *processSetup {
	t.Helper()
	s := &processSetup{temporal: newFrontend(t, schedulesOnly{}), db: pgtest.NewDB(t), observer: pgtest.NewPool(t, 1)}
	var mcpConfig string
	mcpConfig, s.sessions = mcpServer(t)
	s.cfg = worker.Config{
		TemporalAddress: s.temporal.addr, TemporalConnectWait: -1,
		DatabaseURL: s.db.URL, HTTPAddr: "127.0.0.1:0", MCPConfig: mcpConfig,
		Logger: zap.NewNop(),
	}
	return s
}

// dbConns is how many connections the test's database has, or -1 if the
// count failed. It may run off the test's goroutine (in Eventually).
func (s *processSetup) dbConns(t *testing.T) int {
	t.Helper()
	var n int
	err := s.observer.QueryRow(context.Background(), `SELECT count(*) FROM pg_stat_activity WHERE datname = $1`, s.db.Name).Scan(&n)
	if err != nil {
		t.Errorf("count the database's connections: %v", err)
		return -1
	}
	return n
}

// requireReleased fails t unless, within a few seconds, no connection to
// Temporal, to the test's database or to the MCP server is left open.
func (s *processSetup) requireReleased(t *testing.T) {
	t.Helper()
	require.Eventually(t, func() bool { return s.temporal.open() == 0 }, 10*time.Second, 20*time.Millisecond,
		"the Temporal client is closed")
	require.Eventually(t, func() bool { return s.dbConns(t) == 0 }, 10*time.Second, 20*time.Millisecond,
		"the PostgreSQL pool is closed")
	require.Eventually(t, func() bool { return s.sessions() == 0 }, 10*time.Second, 20*time.Millisecond,
		"the MCP sessions are closed")
}

// TestBuildReleasesWhatItAcquiredWhenAStepFails: a Build that fails after
// it reached Temporal, PostgreSQL and an MCP server leaves none of their
// connections open.
func TestBuildReleasesWhatItAcquiredWhenAStepFails(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		change  func(t *testing.T, s *processSetup)
		wantErr string
	}{
		{"the database does not exist", func(t *testing.T, s *processSetup) {
			u, err := url.Parse(s.db.URL)
			require.NoError(t, err)
			u.Path = "/" + s.db.Name + "_missing"
			s.cfg.DatabaseURL = u.String()
		}, "connect to PostgreSQL"},
		{"the deployment's setup fails", func(t *testing.T, s *processSetup) {
			s.cfg.Setup = func(context.Context, *pgxpool.Pool) error { return errors.New("no tables today") }
		}, "setup of the deployment's tables: no tables today"},
		{"the metrics address is taken", func(t *testing.T, s *processSetup) {
			taken, err := net.Listen("tcp", "127.0.0.1:0")
			require.NoError(t, err)
			t.Cleanup(func() { _ = taken.Close() })
			s.cfg.HTTPAddr = taken.Addr().String()
		}, "METRICS_ADDR 127.0.0.1:"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s := setupProcess(t)
			tc.change(t, s)
			p, err := worker.Build(context.Background(), s.cfg)
			require.ErrorContains(t, err, tc.wantErr)
			assert.Nil(t, p)
			require.Positive(t, s.temporal.accepted.Load(), "Build reached Temporal before it failed")
			s.requireReleased(t)
		})
	}
}

// TestCloseReleasesAProcessThatNeverServed: Close without Serve releases
// the HTTP listener and every connection, and the process then refuses to
// serve.
func TestCloseReleasesAProcessThatNeverServed(t *testing.T) {
	t.Parallel()
	s := setupProcess(t)
	s.cfg.HTTPAddr = freeAddr(t)
	p, err := worker.Build(context.Background(), s.cfg)
	require.NoError(t, err)
	require.Equal(t, 1, s.sessions(), "Build opened a session of the MCP server")
	require.Positive(t, s.dbConns(t), "Build connected to the database")

	p.Close()
	p.Close() // a second Close does nothing
	s.requireReleased(t)
	ln, err := net.Listen("tcp", s.cfg.HTTPAddr)
	require.NoError(t, err, "the metrics address is free again")
	require.NoError(t, ln.Close())
	assert.ErrorContains(t, p.Serve(context.Background()), "served or closed already")
}

// waitReady returns the HTTP address a process reports through
// Config.Ready, or fails t if it stopped or took too long.
func waitReady(t *testing.T, ready <-chan string, stopped <-chan error) string {
	t.Helper()
	select {
	case addr := <-ready:
		return addr
	case err := <-stopped:
		t.Fatalf("the process stopped before it was ready: %v", err)
	case <-time.After(30 * time.Second):
		t.Fatal("the process was not ready in 30 seconds")
	}
	return ""
}

// waitStopped returns what a process returned once its context ended.
func waitStopped(t *testing.T, stopped <-chan error) error {
	t.Helper()
	select {
	case err := <-stopped:
		return err
	case <-time.After(time.Minute):
		t.Fatal("the process did not stop in a minute")
		return nil
	}
}

// TestServeAnswersUntilItsContextEnds: a built process serves /healthz,
// /readyz and its metrics once ready, and returns nil when its context
// ends.
func TestServeAnswersUntilItsContextEnds(t *testing.T) {
	t.Parallel()
	s := setupProcess(t)
	ready := make(chan string, 1)
	s.cfg.Ready = func(addr string) { ready <- addr }
	p, err := worker.Build(context.Background(), s.cfg)
	require.NoError(t, err)
	t.Cleanup(p.Close)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	served := make(chan error, 1)
	go func() { served <- p.Serve(ctx) }()
	addr := waitReady(t, ready, served)

	for path, want := range map[string]string{"/healthz": "ok\n", "/metrics": "oncerun_approvals_stats_errors_total 0",
		"/readyz": `{"ready":true,"links":[{"name":"postgres","cut_off":false`} {
		res, err := http.Get("http://" + addr + path)
		require.NoError(t, err)
		body, err := io.ReadAll(res.Body)
		require.NoError(t, res.Body.Close())
		require.NoError(t, err)
		assert.Equal(t, http.StatusOK, res.StatusCode, path)
		assert.Contains(t, string(body), want, path)
	}
	res, err := http.Get("http://" + addr + "/metrics")
	require.NoError(t, err)
	body, err := io.ReadAll(res.Body)
	require.NoError(t, res.Body.Close())
	require.NoError(t, err)
	assert.Contains(t, string(body), "oncerun_worker_polling 1")
	assert.Contains(t, string(body), `oncerun_worker_cut_off{link="postgres"} 0`)
	cancel()
	require.NoError(t, waitStopped(t, served))
	_, err = http.Get("http://" + addr + "/healthz")
	assert.Error(t, err, "the HTTP server stopped with Serve")
}

// TestRunReleasesEverythingWhenItsContextEnds: Run, which is Build, Serve
// and Close, leaves no connection open once it returns.
func TestRunReleasesEverythingWhenItsContextEnds(t *testing.T) {
	t.Parallel()
	s := setupProcess(t)
	ready := make(chan string, 1)
	s.cfg.Ready = func(addr string) { ready <- addr }
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ran := make(chan error, 1)
	go func() { ran <- worker.Run(ctx, s.cfg) }()
	waitReady(t, ready, ran)
	require.Equal(t, 1, s.sessions(), "the worker holds a session of the MCP server")

	cancel()
	require.NoError(t, waitStopped(t, ran))
	s.requireReleased(t)
}

// TestServeThatFailsFreesTheMetricsAddress: when Serve fails before it
// serves (here, Temporal does not create the watchdog's schedule), the
// address of /metrics is free when it returns.
func TestServeThatFailsFreesTheMetricsAddress(t *testing.T) {
	t.Parallel()
	s := setupProcess(t)
	s.temporal = newFrontend(t, workflowservice.UnimplementedWorkflowServiceServer{})
	s.cfg.TemporalAddress, s.cfg.HTTPAddr = s.temporal.addr, freeAddr(t)
	p, err := worker.Build(context.Background(), s.cfg)
	require.NoError(t, err)
	t.Cleanup(p.Close)

	require.ErrorContains(t, p.Serve(context.Background()), "create schedule oncerun-expiry-watchdog")
	ln, err := net.Listen("tcp", s.cfg.HTTPAddr)
	require.NoError(t, err, "the metrics address is free again")
	require.NoError(t, ln.Close())
}
