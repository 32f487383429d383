package mcp

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	mcpsdk "github.com/modelcontextprotocol/go-sdk/mcp"
	"go.uber.org/zap"

	"github.com/oncerun/oncerun/internal/idempotency"
	"github.com/oncerun/oncerun/internal/untrusted"
	"github.com/oncerun/oncerun/tools"
)

// Whether a tool's calls run as MCP tasks ([ToolConfig.Task]).
const (
	// TaskAuto runs a call as a task when the server declares task
	// support for tools/call and the tool's execution.taskSupport is
	// optional or required. The default.
	TaskAuto = "auto"
	// TaskAlways runs every call as a task.
	TaskAlways = "always"
	// TaskNever never does; a tool that requires tasks is refused.
	TaskNever = "never"
)

// Bounds of following a task.
const (
	// taskTTL is the time to live oncerun asks a server to keep its tasks
	// (a server may keep them less): long enough for a worker that dies to
	// be replaced and follow the task.
	taskTTL = 24 * time.Hour
	// DefaultTaskWait is how long one attempt of a step follows its task
	// before it ends, the task still running: the next attempt follows it
	// on. The step's attempt lasts the call's timeout and this.
	DefaultTaskWait = time.Hour
	// minPoll and maxPoll bound the interval between two tasks/get.
	minPoll = 250 * time.Millisecond
	maxPoll = 10 * time.Second
	// maxTaskAnswer bounds a task's answer read over HTTP.
	maxTaskAnswer = 8 << 20
	// maxTaskIDBytes bounds a task's id, and the session recorded with it.
	maxTaskIDBytes = 256
)

// Task statuses, as MCP names them.
const (
	taskWorking       = "working"
	taskInputRequired = "input_required"
	taskCompleted     = "completed"
	taskFailed        = "failed"
	taskCancelled     = "cancelled"
)

// taskInfo is a task as a server describes it (CreateTaskResult's task,
// tasks/get's answer).
type taskInfo struct {
	TaskID        string `json:"taskId"`
	Status        string `json:"status"`
	StatusMessage string `json:"statusMessage,omitempty"`
	PollInterval  int64  `json:"pollInterval,omitempty"`
}

// taskHandle is what a step records of its task with its key: enough for
// another worker to follow it.
type taskHandle struct {
	Kind   string `json:"kind"`
	Server string `json:"server"`
	Tool   string `json:"tool"`
	TaskID string `json:"task_id"`
	// Session and Protocol are the Streamable HTTP session that created
	// the task, and its protocol version: a server may know a task only in
	// its session.
	Session  string `json:"session,omitempty"`
	Protocol string `json:"protocol,omitempty"`
}

const handleKind = "mcp_task"

// usesTasks says whether calls of tool run as tasks, by its configuration,
// the server's capability and the tool's taskSupport.
func (s *server) usesTasks(tool string, mode string) bool {
	switch mode {
	case TaskAlways:
		return true
	case TaskNever:
		return false
	}
	support, _ := s.taskSupport.Load(tool)
	return s.declaresTasks.Load() && (support == "optional" || support == "required")
}

// taskSupportOf is a tool's execution.taskSupport, as the server listed
// it ("" when it said nothing, which means forbidden).
func (s *server) taskSupportOf(tool string) string {
	v, _ := s.taskSupport.Load(tool)
	str, _ := v.(string)
	return str
}

// readToolList reads the raw answer to tools/list for what the SDK's Tool
// does not hold: each tool's execution.taskSupport.
func (s *server) readToolList(result json.RawMessage) {
	var r struct {
		Tools []struct {
			Name      string `json:"name"`
			Execution *struct {
				TaskSupport string `json:"taskSupport"`
			} `json:"execution"`
		} `json:"tools"`
	}
	if json.Unmarshal(result, &r) != nil {
		return
	}
	for _, t := range r.Tools {
		if t.Execution != nil {
			s.taskSupport.Store(t.Name, t.Execution.TaskSupport)
		}
	}
}

// declaresTaskCalls reports whether an initialize or server/discover
// result declares task support for tools/call (tasks.requests.tools.call).
func declaresTaskCalls(result json.RawMessage) bool {
	var r struct {
		Capabilities struct {
			Tasks *struct {
				Requests *struct {
					Tools *struct {
						Call json.RawMessage `json:"call"`
					} `json:"tools"`
				} `json:"requests"`
			} `json:"tasks"`
		} `json:"capabilities"`
	}
	if json.Unmarshal(result, &r) != nil {
		return false
	}
	t := r.Capabilities.Tasks
	return t != nil && t.Requests != nil && t.Requests.Tools != nil && len(t.Requests.Tools.Call) > 0 && string(t.Requests.Tools.Call) != "null"
}

// withTask adds the task member to a tools/call request's params.
func withTask(params json.RawMessage) (json.RawMessage, error) {
	var m map[string]json.RawMessage
	if err := json.Unmarshal(params, &m); err != nil {
		return nil, err
	}
	m["task"] = json.RawMessage(`{"ttl":` + strconv.FormatInt(taskTTL.Milliseconds(), 10) + `}`)
	return json.Marshal(m)
}

// createdTask reads a CreateTaskResult, nil when the result is not one.
func createdTask(result json.RawMessage) *taskInfo {
	var r struct {
		Task *taskInfo `json:"task"`
	}
	if json.Unmarshal(result, &r) != nil || r.Task == nil || r.Task.TaskID == "" {
		return nil
	}
	return r.Task
}

// follow follows the task a call created to its end, having recorded it
// with the step's key (when the call is an external step's), and returns
// the task's result as the call's answer.
func (s *server) follow(ctx context.Context, tool string, lc *liveCall, ti *taskInfo) (*mcpsdk.CallToolResult, error) {
	if err := untrusted.Name("the server's task id", ti.TaskID, maxTaskIDBytes); err != nil {
		// The server runs the call as a task oncerun cannot keep: what it
		// does is unknown.
		return nil, fmt.Errorf("the call runs as a task oncerun cannot follow: %w", err)
	}
	if lc.session != "" {
		if err := untrusted.Name("the server's session id", lc.session, maxTaskIDBytes); err != nil {
			return nil, fmt.Errorf("the call runs as a task oncerun cannot follow: %w", err)
		}
	}
	h := taskHandle{Kind: handleKind, Server: s.cfg.Name, Tool: tool, TaskID: ti.TaskID, Session: lc.session, Protocol: lc.protocol}
	ended := s.unfinishedTask()
	defer func() {
		if ended != nil && lc.ended.Load() {
			ended()
		}
	}()
	if err := s.record(ctx, h); err != nil {
		return nil, err
	}
	lc.task.Store(ti)
	return s.await(ctx, h, lc, ti)
}

// Recording a task's handle is tried recordTries times, recordBackoff
// apart, then doubled.
const (
	recordTries   = 4
	recordBackoff = 100 * time.Millisecond
)

// record records task h with the step's key, trying again when the
// database fails. A lease lost on the way ends the attempt: another worker
// holds the key, and what this one knows must not be written over its
// record. A handle that cannot be recorded otherwise is not fatal: the
// task is followed all the same, but a worker that dies meanwhile leaves
// its outcome to the paired read or a person.
func (s *server) record(ctx context.Context, h taskHandle) error {
	raw, err := json.Marshal(h)
	if err != nil {
		return fmt.Errorf("record task %s: %w", h.TaskID, err)
	}
	pause := recordBackoff
	for try := 1; ; try++ {
		err = idempotency.RecordInProgress(ctx, raw)
		switch {
		case err == nil, errors.Is(err, idempotency.ErrNoRecorder):
			return nil
		case errors.Is(err, idempotency.ErrLeaseLost):
			return fmt.Errorf("the call runs as task %s, which could not be recorded: %w", h.TaskID, err)
		}
		if try == recordTries || ctx.Err() != nil {
			break
		}
		select {
		case <-ctx.Done():
		case <-time.After(pause):
		}
		pause *= 2
	}
	s.opts.Log.Warn("MCP task not recorded with its key: a worker that dies now leaves its outcome to the paired read or a person",
		zap.String("server", s.cfg.Name), zap.String("tool", h.Tool), zap.String("task", h.TaskID), zap.Error(err))
	return nil
}

// unfinishedTask counts a task of this worker's sessions that is not
// known to have ended; done says it ended (or was lost). A session with
// such a task is not closed (an http DELETE would end the task with it at
// a server that keeps tasks per session), so that the next worker can
// follow the task in it.
func (s *server) unfinishedTask() (done func()) {
	s.unfinished.Add(1)
	var once sync.Once
	return func() { once.Do(func() { s.unfinished.Add(-1) }) }
}

// resumer returns the Resume of an external tool whose calls run as
// tasks: it follows the task an earlier attempt recorded, as that attempt
// would have.
func (s *server) resumer(tool string, timeout time.Duration) func(ctx context.Context, call tools.Call, handle json.RawMessage) (any, error) {
	return func(ctx context.Context, call tools.Call, handle json.RawMessage) (any, error) {
		var h taskHandle
		if err := json.Unmarshal(handle, &h); err != nil || h.Kind != handleKind || h.TaskID == "" {
			return nil, fmt.Errorf("MCP tool %q of %s: the recorded handle %s is not an MCP task's: %w", tool, s.describe(),
				untrusted.Cut(string(handle), 200), idempotency.ErrHandleLost)
		}
		lc, end := s.beginLive(ctx, tool, nil)
		defer end()
		lc.timeout = timeout
		ti := &taskInfo{TaskID: h.TaskID, Status: taskWorking}
		lc.task.Store(ti)
		res, err := s.await(ctx, h, lc, ti)
		if err != nil {
			return nil, fmt.Errorf("MCP tool %q of %s: %w", tool, s.describe(), err)
		}
		return s.answerOf(tool, res)
	}
}

// await polls task h until it ends, and returns its result: a task that
// ends failed is a definite failure; one that was cancelled (by somebody
// else: oncerun never cancels a task), or that the server no longer knows,
// is idempotency.ErrHandleLost, its outcome left to the paired read or a
// person; questions the server asks while the task waits for input go to
// a person through lc. Each tasks/get, and tasks/result of a task that
// has ended, is bounded by the call's timeout; tasks/result of a task
// that waits for input lasts as long as the person takes.
func (s *server) await(ctx context.Context, h taskHandle, lc *liveCall, ti *taskInfo) (*mcpsdk.CallToolResult, error) {
	poll := clampPoll(ti.PollInterval)
	for {
		got, err := s.boundedTaskCall(ctx, h, lc, "tasks/get")
		if err != nil {
			return nil, fmt.Errorf("read task %s: %w", h.TaskID, err)
		}
		var st taskInfo
		if err := json.Unmarshal(got, &st); err != nil {
			return nil, fmt.Errorf("read task %s: its answer %s: %w", h.TaskID, untrusted.Cut(string(got), 200), err)
		}
		if st.PollInterval > 0 {
			poll = clampPoll(st.PollInterval)
		}
		switch st.Status {
		case taskCompleted, taskFailed, taskCancelled:
			lc.ended.Store(true)
			return s.ended(ctx, h, lc, st)
		case taskInputRequired:
			// While the task waits for input, tasks/result carries the
			// server's questions first, then the result once it has ended.
			raw, err := s.taskCall(ctx, h, lc, "tasks/result")
			if err != nil {
				return nil, fmt.Errorf("read the result of task %s: %w", h.TaskID, err)
			}
			again, err := s.boundedTaskCall(ctx, h, lc, "tasks/get")
			if err == nil {
				err = json.Unmarshal(again, &st)
			}
			if err != nil {
				return nil, fmt.Errorf("read task %s after its questions: %w", h.TaskID, err)
			}
			switch st.Status {
			case taskCompleted:
				lc.ended.Store(true)
				var res mcpsdk.CallToolResult
				if err := json.Unmarshal(raw, &res); err != nil {
					return nil, fmt.Errorf("read the result of task %s: %w", h.TaskID, unreadableAnswer(err))
				}
				return &res, nil
			case taskFailed, taskCancelled:
				lc.ended.Store(true)
				return s.ended(ctx, h, lc, st)
			}
		case taskWorking:
		default:
			return nil, fmt.Errorf("task %s has a status oncerun does not know: %q", h.TaskID, untrusted.Cut(st.Status, 40))
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("task %s still %s when the attempt ended: %w", h.TaskID, st.Status, context.Cause(ctx))
		case <-time.After(poll):
		}
	}
}

// ended reads the result of task h, which has ended with st: completed,
// its result; failed, a definite failure, saying what the server said of
// it when it can be read; cancelled, an outcome oncerun cannot know (what
// the task did before it was cancelled).
func (s *server) ended(ctx context.Context, h taskHandle, lc *liveCall, st taskInfo) (*mcpsdk.CallToolResult, error) {
	if st.Status == taskCancelled {
		return nil, fmt.Errorf("the task %s was cancelled%s, by somebody other than oncerun: what it did before is unknown: %w",
			h.TaskID, colonText(st.StatusMessage), idempotency.ErrHandleLost)
	}
	raw, err := s.boundedTaskCall(ctx, h, lc, "tasks/result")
	var res mcpsdk.CallToolResult
	if err == nil {
		if uerr := json.Unmarshal(raw, &res); uerr != nil {
			err = unreadableAnswer(uerr)
		}
	}
	if st.Status == taskFailed {
		said := ""
		if err == nil {
			said = ": " + contentText(res.Content)
		}
		return nil, tools.Permanent(tools.NotApplied(fmt.Errorf("the task %s ended failed%s%s", h.TaskID, colonText(st.StatusMessage), said)))
	}
	if err != nil {
		return nil, fmt.Errorf("read the result of task %s: %w", h.TaskID, err)
	}
	return &res, nil
}

// boundedTaskCall is taskCall bounded by the call's timeout.
func (s *server) boundedTaskCall(ctx context.Context, h taskHandle, lc *liveCall, method string) (json.RawMessage, error) {
	if lc.timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeoutCause(ctx, lc.timeout, fmt.Errorf("%s took longer than the call's timeout (%s): %w", method, lc.timeout, errCallTimeout))
		defer cancel()
	}
	raw, err := s.taskCall(ctx, h, lc, method)
	if cause := context.Cause(ctx); err != nil && errors.Is(cause, errCallTimeout) && !errors.Is(err, errCallTimeout) {
		err = fmt.Errorf("%w: %w", err, cause)
	}
	return raw, err
}

func colonText(s string) string {
	if s == "" {
		return ""
	}
	return " (" + untrusted.Cut(s, 200) + ")"
}

func clampPoll(ms int64) time.Duration {
	if ms <= 0 {
		return time.Second
	}
	return min(max(time.Duration(ms)*time.Millisecond, minPoll), maxPoll)
}

// errTaskUnknown is a server's refusal of a task it does not know: an
// invalid-params answer to tasks/get or tasks/result.
func taskUnknown(err error) bool {
	var rpc *jsonrpc.Error
	return errors.As(err, &rpc) && rpc.Code == jsonrpc.CodeInvalidParams
}

// taskCall sends method about task h and returns its result: over HTTP to
// the session that created the task (falling back to a session of this
// worker's when that one is gone), over stdio on the current session. A
// server that answers that it does not know the task makes the handle
// lost.
func (s *server) taskCall(ctx context.Context, h taskHandle, lc *liveCall, method string) (json.RawMessage, error) {
	params, err := json.Marshal(map[string]string{"taskId": h.TaskID})
	if err != nil {
		return nil, err
	}
	var raw json.RawMessage
	if s.cfg.Transport == TransportHTTP {
		raw, err = s.httpTaskCall(ctx, h, lc, method, params)
	} else {
		raw, err = s.connTaskCall(ctx, method, params)
	}
	if taskUnknown(err) {
		lc.ended.Store(true)
		return nil, fmt.Errorf("the server does not know the task: %w: %w", err, idempotency.ErrHandleLost)
	}
	return raw, err
}

// connTaskCall sends method on the current session's connection.
func (s *server) connTaskCall(ctx context.Context, method string, params json.RawMessage) (json.RawMessage, error) {
	if _, err := s.session(ctx); err != nil {
		return nil, err
	}
	conn := s.conn.Load()
	if conn == nil {
		return nil, errors.New("no session is open")
	}
	return conn.call(ctx, method, params)
}

// httpTaskCall posts method to the task's session, or, when the server no
// longer knows that session (a worker's session it forgot), to this
// worker's own.
func (s *server) httpTaskCall(ctx context.Context, h taskHandle, lc *liveCall, method string, params json.RawMessage) (json.RawMessage, error) {
	raw, status, err := s.post(ctx, h.Session, h.Protocol, lc, method, params)
	if status != http.StatusNotFound || h.Session == "" {
		return raw, err
	}
	cs, serr := s.session(ctx)
	if serr != nil {
		return nil, errors.Join(err, serr)
	}
	proto := ""
	if ir := cs.InitializeResult(); ir != nil {
		proto = ir.ProtocolVersion
	}
	raw, status, err = s.post(ctx, cs.ID(), proto, lc, method, params)
	if status == http.StatusNotFound {
		return nil, fmt.Errorf("%w: %w", err, idempotency.ErrHandleLost)
	}
	return raw, err
}

// postIDs numbers the requests oncerun posts itself.
var postIDs atomic.Int64

// post sends one JSON-RPC request of method to the server's endpoint in
// session, and reads its answer, JSON or a stream of server-sent events:
// a question the server asks on the stream (elicitation/create, while a
// task waits for input) is put to a person through lc and answered; other
// requests are refused. It returns the HTTP status with any error.
func (s *server) post(ctx context.Context, session, protocol string, lc *liveCall, method string, params json.RawMessage) (json.RawMessage, int, error) {
	id := ownIDPrefix + strconv.FormatInt(postIDs.Add(1), 10)
	body, err := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": id, "method": method, "params": params})
	if err != nil {
		return nil, 0, err
	}
	resp, err := s.send(ctx, session, protocol, body)
	if err != nil {
		return nil, 0, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		msg, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		return nil, resp.StatusCode, fmt.Errorf("%s: HTTP %d: %s", method, resp.StatusCode, untrusted.Cut(strings.TrimSpace(string(msg)), 200))
	}
	mt, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type"))
	if mt != "text/event-stream" {
		raw, err := io.ReadAll(io.LimitReader(resp.Body, maxTaskAnswer))
		if err != nil {
			return nil, resp.StatusCode, err
		}
		res, err := answerTo(raw, id)
		return res, resp.StatusCode, err
	}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), maxTaskAnswer)
	var data []byte
	for sc.Scan() {
		line := bytes.TrimSuffix(sc.Bytes(), []byte("\r"))
		if len(line) > 0 {
			if d, ok := bytes.CutPrefix(line, []byte("data:")); ok {
				if len(data) > 0 {
					data = append(data, '\n')
				}
				data = append(data, bytes.TrimPrefix(d, []byte(" "))...)
			}
			continue
		}
		if len(data) == 0 {
			continue
		}
		event := data
		data = nil
		msg, err := jsonrpc.DecodeMessage(event)
		if err != nil {
			continue
		}
		switch m := msg.(type) {
		case *jsonrpc.Response:
			if fmt.Sprint(m.ID.Raw()) == id {
				if m.Error != nil {
					return nil, resp.StatusCode, m.Error
				}
				return m.Result, resp.StatusCode, nil
			}
		case *jsonrpc.Request:
			if m.IsCall() {
				s.answerStreamed(ctx, session, protocol, lc, m)
			}
		}
	}
	if err := sc.Err(); err != nil {
		return nil, resp.StatusCode, err
	}
	return nil, resp.StatusCode, fmt.Errorf("%s: the answer stream ended without an answer", method)
}

// send posts body to the server's endpoint, in session.
func (s *server) send(ctx context.Context, session, protocol string, body []byte) (*http.Response, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, untrusted.Redact(s.cfg.URL), bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	if session != "" {
		req.Header.Set("Mcp-Session-Id", session)
	}
	if protocol != "" {
		req.Header.Set("Mcp-Protocol-Version", protocol)
	}
	return s.httpClient.Do(req)
}

// answerTo reads the answer to request id from a JSON body.
func answerTo(raw []byte, id string) (json.RawMessage, error) {
	msg, err := jsonrpc.DecodeMessage(raw)
	if err != nil {
		return nil, fmt.Errorf("the answer is not JSON-RPC: %w", err)
	}
	r, ok := msg.(*jsonrpc.Response)
	if !ok || fmt.Sprint(r.ID.Raw()) != id {
		return nil, errors.New("the answer is not the answer to the request")
	}
	if r.Error != nil {
		return nil, r.Error
	}
	return r.Result, nil
}

// answerStreamed answers a request the server sent on a stream oncerun
// reads itself: a question goes to a person, through lc; anything else is
// refused.
func (s *server) answerStreamed(ctx context.Context, session, protocol string, lc *liveCall, req *jsonrpc.Request) {
	var out map[string]any
	if req.Method == "elicitation/create" {
		var p mcpsdk.ElicitParams
		res, err := (*mcpsdk.ElicitResult)(nil), json.Unmarshal(req.Params, &p)
		if err == nil {
			res, err = s.askThrough(lc, &p)
		}
		if err == nil {
			out = map[string]any{"jsonrpc": "2.0", "id": req.ID.Raw(), "result": res}
		} else {
			out = map[string]any{"jsonrpc": "2.0", "id": req.ID.Raw(), "error": map[string]any{"code": jsonrpc.CodeInternalError, "message": err.Error()}}
		}
	} else {
		out = map[string]any{"jsonrpc": "2.0", "id": req.ID.Raw(), "error": map[string]any{"code": jsonrpc.CodeMethodNotFound,
			"message": "oncerun does not answer " + req.Method}}
	}
	body, err := json.Marshal(out)
	if err != nil {
		return
	}
	resp, err := s.send(ctx, session, protocol, body)
	if err != nil {
		s.opts.Log.Warn("the answer to an MCP server's request was not delivered", zap.String("server", s.cfg.Name),
			zap.String("method", req.Method), zap.Error(err))
		return
	}
	_ = resp.Body.Close()
}
