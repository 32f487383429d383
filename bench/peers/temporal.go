package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"syscall"
	"time"

	"go.temporal.io/sdk/client"
	sdklog "go.temporal.io/sdk/log"
	"go.uber.org/zap"

	"github.com/oncerun/oncerun/internal/devserver"
	"github.com/oncerun/oncerun/worker"
)

// Kinds of Temporal server (-temporal).
const (
	temporalSQLite   = "sqlite"
	temporalPostgres = "postgres"
)

// temporalServer is `oncerun-dev temporal-server` running as a process of
// its own, so that its CPU time can be read apart from this process's.
type temporalServer struct {
	kind      string
	addr      string
	namespace string
	// databases are its own on PostgreSQL (none on SQLite).
	databases []string
	cmd       *exec.Cmd
	exited    chan struct{}
	logPath   string
}

// banner is the line the server prints once it serves.
var banner = regexp.MustCompile(`^Temporal (?:node )?(\S+), namespace (\S+),`)

// startTemporal starts a Temporal server of kind with its state under dir
// (on SQLite) or in databases prefix_temporal and prefix_visibility (on
// PostgreSQL), and returns once it prints that it serves.
func startTemporal(ctx context.Context, binary, kind, dir string, pg server, prefix string) (*temporalServer, error) {
	port, err := devserver.FreePort("127.0.0.1")
	if err != nil {
		return nil, err
	}
	args := []string{"temporal-server", "--port", strconv.Itoa(port), "--data-dir", dir}
	s := &temporalServer{kind: kind, exited: make(chan struct{}), logPath: filepath.Join(dir, "temporal-server.log")}
	if kind == temporalPostgres {
		cl := devserver.Cluster{DatabasePrefix: prefix}
		mainDB, visibilityDB := cl.Databases()
		s.databases = []string{mainDB, visibilityDB}
		args = append(args, "--postgres", pg.url, "--databases", prefix)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	logFile, err := os.Create(s.logPath)
	if err != nil {
		return nil, err
	}
	s.cmd = exec.Command(binary, args...)
	s.cmd.Stderr = logFile
	// The server does not outlive the benchmark, however it ends.
	s.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	stdout, err := s.cmd.StdoutPipe()
	if err != nil {
		logFile.Close()
		return nil, err
	}
	if err := s.cmd.Start(); err != nil {
		logFile.Close()
		return nil, fmt.Errorf("start %s: %w", binary, err)
	}
	ready := make(chan []string, 1)
	go func() {
		defer close(s.exited)
		defer logFile.Close()
		lines, served := bufio.NewScanner(stdout), false
		for lines.Scan() {
			fmt.Fprintln(logFile, lines.Text())
			if m := banner.FindStringSubmatch(lines.Text()); m != nil && !served {
				ready <- m
				served = true
			}
		}
		_ = s.cmd.Wait()
	}()
	select {
	case m := <-ready:
		s.addr, s.namespace = m[1], m[2]
	case <-s.exited:
		return nil, fmt.Errorf("the Temporal server exited before it served; its log is %s", s.logPath)
	case <-time.After(3 * time.Minute):
		s.stop()
		return nil, fmt.Errorf("the Temporal server did not serve within 3 minutes; its log is %s", s.logPath)
	case <-ctx.Done():
		s.stop()
		return nil, ctx.Err()
	}
	return s, nil
}

// pid is the server's process id.
func (s *temporalServer) pid() int { return s.cmd.Process.Pid }

// dial connects a client to the server, trying again while it does not
// answer yet.
func (s *temporalServer) dial(ctx context.Context) (client.Client, error) {
	return worker.DialTemporal(ctx, client.Options{
		HostPort: s.addr, Namespace: s.namespace,
		Logger: sdklog.NewStructuredLogger(slog.New(slog.NewJSONHandler(io.Discard, nil))),
	}, time.Minute, zap.NewNop())
}

// stop asks the server to stop and kills it if it has not in 30 seconds.
func (s *temporalServer) stop() error {
	if err := s.cmd.Process.Signal(syscall.SIGTERM); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return err
	}
	select {
	case <-s.exited:
		return nil
	case <-time.After(30 * time.Second):
	}
	if err := s.cmd.Process.Kill(); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return err
	}
	<-s.exited
	return nil
}
