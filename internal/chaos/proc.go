package chaos

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/oncerun/oncerun/internal/temporalconn"
)

// proc is one child process of the harness, started again on demand with
// the same arguments, environment and log file (appended to).
type proc struct {
	name    string
	binary  string
	args    []string
	env     []string
	logPath string
	// envAt, when set, adds variables for the n-th start (from 0).
	envAt func(n int) []string
	// healthy reports whether a started process serves.
	healthy func(ctx context.Context) bool

	mu     sync.Mutex
	cmd    *exec.Cmd
	exited chan struct{} // closed when cmd has exited
	starts int
}

// start starts the process and waits until it is healthy or exits.
func (p *proc) start(ctx context.Context, wait time.Duration) error {
	log, err := os.OpenFile(p.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	defer log.Close()
	cmd := exec.Command(p.binary, p.args...)
	// Only the TEMPORAL_ variables the harness sets reach the child: an API
	// key, TLS settings or a profile meant for another Temporal do not
	// reach the harness's plain local servers.
	cmd.Env = append(temporalconn.LocalEnv(os.Environ(), filepath.Dir(p.logPath)), p.env...)
	if p.envAt != nil {
		p.mu.Lock()
		cmd.Env = append(cmd.Env, p.envAt(p.starts)...)
		p.mu.Unlock()
	}
	cmd.Stdout, cmd.Stderr = log, log
	cmd.SysProcAttr = childAttr()
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start %s: %w", p.name, err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	p.mu.Lock()
	p.cmd, p.exited = cmd, exited
	p.starts++
	p.mu.Unlock()
	deadline := time.Now().Add(wait)
	for {
		if p.healthy(ctx) {
			return nil
		}
		select {
		case <-exited:
			return fmt.Errorf("%s exited while starting (%s): %q; its log is %s", p.name, cmd.ProcessState, lastLine(p.logPath), p.logPath)
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s was not healthy after %s; its log is %s", p.name, wait, p.logPath)
		}
	}
}

// running reports whether the process is up, and its exit channel.
func (p *proc) running() (bool, <-chan struct{}) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd == nil {
		return false, nil
	}
	select {
	case <-p.exited:
		return false, p.exited
	default:
		return true, p.exited
	}
}

// kill SIGKILLs the process and waits for it to be gone. It reports false
// if the process was not running.
func (p *proc) kill() bool {
	p.mu.Lock()
	cmd, exited := p.cmd, p.exited
	p.mu.Unlock()
	if cmd == nil {
		return false
	}
	select {
	case <-exited:
		return false
	default:
	}
	_ = cmd.Process.Signal(syscall.SIGKILL)
	<-exited
	return true
}

// pid is the process id of the last start, or 0.
func (p *proc) pid() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd == nil || p.cmd.Process == nil {
		return 0
	}
	return p.cmd.Process.Pid
}

// exitState describes how the process's last run ended.
func (p *proc) exitState() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd == nil || p.cmd.ProcessState == nil {
		return "not started"
	}
	return p.cmd.ProcessState.String()
}

// killedBySignal reports whether the process's last run ended by SIGKILL:
// the harness's kill or a crash fault, never a bug's exit.
func (p *proc) killedBySignal() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd == nil || p.cmd.ProcessState == nil {
		return false
	}
	ws, ok := p.cmd.ProcessState.Sys().(syscall.WaitStatus)
	return ok && ws.Signaled() && ws.Signal() == syscall.SIGKILL
}

// stop ends the process with SIGTERM, and SIGKILL after grace.
func (p *proc) stop(grace time.Duration) {
	p.mu.Lock()
	cmd, exited := p.cmd, p.exited
	p.mu.Unlock()
	if cmd == nil {
		return
	}
	_ = cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-exited:
	case <-time.After(grace):
		_ = cmd.Process.Signal(syscall.SIGKILL)
		<-exited
	}
}

// supervised keeps a worker process up: when it exits for any reason
// other than stop, it is started again. crashes counts the exits the
// harness did not cause (the crash faults).
type supervised struct {
	*proc
	mu       sync.Mutex
	stopping bool
	killing  bool
	// redeploying is set while the harness stops the worker to start it
	// again under its next configuration (deploy mode).
	redeploying bool
	crashes     int
	failures    []failure
	// deaths are the harness's kills and the crash faults, as they were
	// seen.
	deaths []death
}

// failure is a start that did not come up, or a process that was up and
// exited though nobody killed it (wasUp).
type failure struct {
	at    time.Time
	err   error
	wasUp bool
}

// keepUp starts the process again whenever it exits, until ctx is done
// or stopAll is called.
func (s *supervised) keepUp(ctx context.Context) {
	for {
		var err error
		if up, _ := s.running(); !up {
			err = s.start(ctx, 2*time.Minute)
		}
		if _, exited := s.running(); exited == nil || ctx.Err() != nil {
			// It could not even be started.
			s.record(err, false)
		} else {
			pid := s.pid()
			select {
			case <-ctx.Done():
				return
			case <-exited:
			}
			gone := time.Now()
			s.mu.Lock()
			if s.stopping {
				s.mu.Unlock()
				return
			}
			killing, redeploying := s.killing, s.redeploying
			s.killing, s.redeploying = false, false
			s.mu.Unlock()
			switch {
			case redeploying:
				// Stopped to be started again under the next deploy.
			case killing:
				s.died(death{worker: s.name, pid: pid, at: gone, cause: deathKill})
			case s.killedBySignal():
				s.mu.Lock()
				s.crashes++ // a crash fault
				s.mu.Unlock()
				s.died(death{worker: s.name, pid: pid, at: gone, cause: deathCrash})
			case err != nil:
				s.record(err, false) // a start that failed
			default:
				// It was up, and it exited though nobody killed it.
				s.record(fmt.Errorf("%s exited by itself: %s; its log is %s", s.name, s.exitState(), s.logPath), true)
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(200 * time.Millisecond):
		}
	}
}

func (s *supervised) died(d death) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.deaths = append(s.deaths, d)
}

func (s *supervised) record(err error, wasUp bool) {
	if err == nil {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.failures = append(s.failures, failure{at: time.Now(), err: err, wasUp: wasUp})
}

// chaosKill SIGKILLs the worker on the harness's behalf; keepUp starts it
// again.
func (s *supervised) chaosKill() bool {
	s.mu.Lock()
	if s.stopping {
		s.mu.Unlock()
		return false
	}
	s.killing = true
	s.mu.Unlock()
	if s.kill() {
		return true
	}
	s.mu.Lock()
	s.killing = false
	s.mu.Unlock()
	return false
}

// redeploy stops the worker as a rolling deploy does (SIGTERM: it stops
// polling and finishes what it runs, SIGKILL if it has not within 45 s)
// and returns once it is gone; keepUp starts it again, under the
// configuration its next start gets.
func (s *supervised) redeploy() {
	s.mu.Lock()
	if s.stopping {
		s.mu.Unlock()
		return
	}
	s.redeploying = true
	s.mu.Unlock()
	s.stop(45 * time.Second)
}

func (s *supervised) stopAll(grace time.Duration) {
	s.mu.Lock()
	s.stopping = true
	s.mu.Unlock()
	s.stop(grace)
}

func (s *supervised) counts() (crashes int, failures []failure) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.crashes, append([]failure(nil), s.failures...)
}

// lastLine is the last line of the log at path that is not empty (a
// process that exits on an error prints it last), cut to 300 bytes.
func lastLine(path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	last := lines[len(lines)-1]
	if len(last) > 300 {
		last = last[:300]
	}
	return last
}

func logPath(dir, name string) string { return filepath.Join(dir, "logs", name+".log") }
