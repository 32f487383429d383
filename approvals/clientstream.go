package approvals

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/oncerun/oncerun/internal/events"
	"github.com/oncerun/oncerun/internal/untrusted"
)

// FollowRequest says what [Client.Follow] follows.
type FollowRequest struct {
	// RunID is the run followed: its events and its children's. Empty:
	// every run of the token's tenant.
	RunID string
	// After is the offset in RunID's log to start after: 0, the default,
	// starts at its beginning.
	After int64
	// Cursor is, without RunID, the place in the tenant's stream to start
	// after, as an event's Cursor gave it. Empty: at the events to come.
	Cursor string
	// Lost, when set, is told of each connection lost or refused, and of
	// how long Follow waits before it connects again.
	Lost func(err error, wait time.Duration)
}

// Timing of Follow's connections.
const (
	// followFirstWait is the wait before connecting again when the stream
	// named none (its retry field).
	followFirstWait = 500 * time.Millisecond
	// followMaxWait bounds the wait, doubled after each failed attempt.
	followMaxWait = 5 * time.Second
	// followSilence is how long a connection may stay silent before it is
	// taken for lost: the service sends a heartbeat every 15 seconds.
	followSilence = 45 * time.Second
	// maxStreamMessage bounds one message of a stream.
	maxStreamMessage = 16 << 20
)

// errRunEnded ends a connection whose run has ended.
var errRunEnded = errors.New("the run ended")

// errSilent ends a connection that stayed silent too long.
var errSilent = fmt.Errorf("no word from the service for %s", followSilence)

// finalError is an error that connecting again cannot mend.
type finalError struct{ err error }

func (e finalError) Error() string { return e.err.Error() }
func (e finalError) Unwrap() error { return e.err }

// Follow hands each event of a run and its children (f.RunID), or of
// every run of the token's tenant, to each, in order, as the service
// streams them (Server-Sent Events). An ephemeral event (a model's text as
// it comes) is handed on as it arrives and never again.
//
// A lost connection is opened again, after the wait the stream asked for
// (its retry field) or half a second, doubled after each failed attempt
// up to five seconds, from the last event handed on: no event is handed
// on twice or skipped. Follow returns nil once it has handed on the event
// that ended f.RunID (see [events.Ends]); the tenant's stream never ends.
// It returns ctx's error once ctx is done, the error of each when each
// fails, and the service's refusal (an *APIError: an unknown run, a bad
// token) when connecting again cannot help. Client.HTTP, when set, makes
// the connections, and its Timeout, if any, ends each one.
func (c *Client) Follow(ctx context.Context, f FollowRequest, each func(Event) error) error {
	fl := &follower{c: c, f: f, each: each, last: f.Cursor, seen: f.After}
	if f.RunID != "" {
		fl.last = strconv.FormatInt(f.After, 10)
	}
	failures := 0
	for {
		opened, err := fl.connect(ctx)
		if errors.Is(err, errRunEnded) {
			return nil
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		var fe finalError
		if errors.As(err, &fe) {
			return fe.err
		}
		if opened {
			failures = 0
		}
		wait := fl.wait(failures)
		failures++
		if f.Lost != nil {
			f.Lost(err, wait)
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-t.C:
		}
	}
}

// follower is the state of one Follow across its connections.
type follower struct {
	c    *Client
	f    FollowRequest
	each func(Event) error
	// last is the id of the last event handed on, sent as Last-Event-ID.
	last string
	// seen is, following a run, the offset of the last event handed on.
	seen int64
	// retry is the wait the stream asked for; 0 when it named none.
	retry time.Duration
}

// wait is how long to wait before the attempt after failures failed ones.
func (fl *follower) wait(failures int) time.Duration {
	first := fl.retry
	if first <= 0 {
		first = followFirstWait
	}
	limit := max(followMaxWait, first)
	wait := first
	for range failures {
		wait *= 2
		if wait >= limit {
			return limit
		}
	}
	return wait
}

// connect follows one connection until it ends; opened reports whether the
// service answered with a stream.
func (fl *follower) connect(ctx context.Context) (opened bool, err error) {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	// A connection that stays silent past its heartbeats is lost.
	silence := time.AfterFunc(followSilence, func() { cancel(errSilent) })
	defer silence.Stop()

	path := "/v1/events"
	q := url.Values{}
	if fl.f.RunID != "" {
		path = "/v1/runs/" + url.PathEscape(fl.f.RunID) + "/events"
	}
	if fl.last != "" {
		// The query's after wins over Last-Event-ID: both say the same.
		q.Set("after", fl.last)
	}
	if len(q) > 0 {
		path += "?" + q.Encode()
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, strings.TrimSuffix(fl.c.BaseURL, "/")+path, nil)
	if err != nil {
		return false, finalError{fmt.Errorf("approvals API at %s (ONCERUN_API) is not a usable URL", untrusted.Redact(fl.c.BaseURL))}
	}
	req.Header.Set("Authorization", "Bearer "+fl.c.Token)
	req.Header.Set("Accept", "text/event-stream")
	req.Header.Set("Cache-Control", "no-store")
	if fl.last != "" {
		req.Header.Set("Last-Event-ID", fl.last)
	}
	hc := fl.c.HTTP
	if hc == nil {
		hc = &http.Client{}
	}
	resp, err := hc.Do(req)
	if err != nil {
		if errors.Is(context.Cause(ctx), errSilent) {
			err = errSilent
		}
		return false, fmt.Errorf("approvals API (ONCERUN_API): %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		raw, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
		err := streamRefusal(resp.StatusCode, raw)
		// A service that is busy or restarting may answer later.
		if resp.StatusCode >= 500 || resp.StatusCode == http.StatusTooManyRequests || resp.StatusCode == http.StatusRequestTimeout {
			return false, err
		}
		return false, finalError{err}
	}
	if ct := resp.Header.Get("Content-Type"); !strings.HasPrefix(ct, "text/event-stream") {
		return false, finalError{fmt.Errorf("approvals API: answered %q, not an event stream (text/event-stream)", ct)}
	}
	sr := newSSEReader(resp.Body, func() { silence.Reset(followSilence) })
	for {
		m, err := sr.next()
		if sr.retry > 0 {
			fl.retry = sr.retry
		}
		if err != nil {
			switch {
			case errors.Is(context.Cause(ctx), errSilent):
				err = errSilent
			case err == io.EOF:
				err = errors.New("the service closed the stream")
			}
			return true, fmt.Errorf("approvals API (ONCERUN_API): event stream: %w", err)
		}
		if err := fl.hand(m); err != nil {
			return true, err
		}
	}
}

// hand hands a message's event to each, once.
func (fl *follower) hand(m sseMessage) error {
	if m.data == "" {
		// A message with an id only moves the place to resume from.
		if m.hasID {
			fl.last = m.id
		}
		return nil
	}
	var e Event
	if err := json.Unmarshal([]byte(m.data), &e); err != nil {
		return fmt.Errorf("approvals API: event stream: decode an event: %w", err)
	}
	if !e.Ephemeral && fl.f.RunID != "" && e.Offset > 0 && e.Offset <= fl.seen {
		// Told again by a service that resumed from an earlier place.
		return nil
	}
	if err := fl.each(e); err != nil {
		return finalError{err}
	}
	if m.hasID {
		fl.last = m.id
	}
	if !e.Ephemeral && e.Offset > fl.seen {
		fl.seen = e.Offset
	}
	if fl.f.RunID != "" && e.RunID == fl.f.RunID && events.Ends(e.Type) {
		return errRunEnded
	}
	return nil
}

// streamRefusal is the error of a stream the service refused to open.
func streamRefusal(status int, raw []byte) error {
	ae := &APIError{Status: status, Code: "http_error", Message: strings.TrimSpace(string(raw[:min(len(raw), 200)]))}
	var eb ErrorBody
	if json.Unmarshal(raw, &eb) == nil && eb.Error.Code != "" {
		ae.Code, ae.Message = eb.Error.Code, eb.Error.Message
	}
	return fmt.Errorf("approvals API: %w (HTTP %d, %s)", ae, ae.Status, ae.Code)
}

// sseMessage is one message of a Server-Sent Events stream.
type sseMessage struct {
	// id is the message's id field; hasID tells an empty one from none.
	id    string
	hasID bool
	event string
	// data is the message's data lines joined by "\n".
	data string
}

// sseReader reads a stream of Server-Sent Events as the WHATWG
// EventSource does: the fields id, event, data and retry, other fields and
// comments (lines that start with a colon) skipped, the data lines of a
// message joined by "\n", a message ended by a blank line.
type sseReader struct {
	sc *bufio.Scanner
	// retry is the last reconnection time the stream gave; 0 for none.
	retry time.Duration
	// line, when set, is called for each line read.
	line func()
}

func newSSEReader(r io.Reader, line func()) *sseReader {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64<<10), maxStreamMessage)
	return &sseReader{sc: sc, line: line}
}

// next returns the next message that has data or an id, or io.EOF when
// the stream ends (a message it cut short is dropped).
func (r *sseReader) next() (sseMessage, error) {
	var (
		m       sseMessage
		data    []string
		hasData bool
	)
	for r.sc.Scan() {
		if r.line != nil {
			r.line()
		}
		line := r.sc.Text()
		if line == "" {
			if hasData || m.hasID {
				m.data = strings.Join(data, "\n")
				return m, nil
			}
			m = sseMessage{}
			continue
		}
		if line[0] == ':' {
			continue
		}
		field, value, _ := strings.Cut(line, ":")
		value = strings.TrimPrefix(value, " ")
		switch field {
		case "data":
			data, hasData = append(data, value), true
		case "event":
			m.event = value
		case "id":
			if !strings.ContainsRune(value, 0) {
				m.id, m.hasID = value, true
			}
		case "retry":
			if ms, err := strconv.ParseUint(value, 10, 31); err == nil {
				r.retry = time.Duration(ms) * time.Millisecond
			}
		}
	}
	if err := r.sc.Err(); err != nil {
		return sseMessage{}, err
	}
	return sseMessage{}, io.EOF
}
