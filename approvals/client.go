package approvals

import (
	"bytes"
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

	"github.com/oncerun/oncerun/internal/untrusted"
	"github.com/oncerun/oncerun/workflows"
)

// Client calls the approvals API, for approvers and operators on other
// machines: it needs only the service's URL and a token.
type Client struct {
	// BaseURL is the service's address, such as https://approvals.example.com.
	BaseURL string
	// Token is the bearer token.
	Token string
	// HTTP is the HTTP client. Default: one with a 30-second timeout.
	HTTP *http.Client
}

// ErrNoSuchStep is returned by [Client.StepHash] when the tenant has no such
// step among its approvals.
var ErrNoSuchStep = errors.New("no such step asked for approval")

// Start starts a run, or finds it started. The status is 201 for a new run
// and 200 for one started before with the same request.
func (c *Client) Start(ctx context.Context, req StartRequest) (StartResponse, int, error) {
	var out StartResponse
	status, err := c.do(ctx, http.MethodPost, "/v1/runs", req, &out)
	return out, status, err
}

// Status returns a run's status.
func (c *Client) Status(ctx context.Context, runID string) (workflows.Status, error) {
	var out workflows.Status
	_, err := c.do(ctx, http.MethodGet, "/v1/runs/"+url.PathEscape(runID), nil, &out)
	return out, err
}

// Approvals lists the token's tenant's approvals in a view.
func (c *Client) Approvals(ctx context.Context, view View) ([]Item, error) {
	var out ApprovalList
	q := url.Values{"state": {string(view)}, "limit": {strconv.Itoa(MaxListLimit)}}
	_, err := c.do(ctx, http.MethodGet, "/v1/approvals?"+q.Encode(), nil, &out)
	return out.Approvals, err
}

// StepHash returns the arguments hash of a step that asked for approval:
// pending, or needing resolution (a decision to send again), or decided.
func (c *Client) StepHash(ctx context.Context, runID string, step int64) (string, error) {
	it, err := c.Step(ctx, runID, step)
	return it.ArgsHash, err
}

// Step returns the approvals list's item of step step of run runID: its
// arguments hash and the round it waits in, among others.
func (c *Client) Step(ctx context.Context, runID string, step int64) (Item, error) {
	for _, view := range []View{ViewPending, ViewNeedsResolution, ViewDecided} {
		items, err := c.Approvals(ctx, view)
		if err != nil {
			return Item{}, err
		}
		for _, it := range items {
			if it.RunID == runID && it.Step == step {
				return it, nil
			}
		}
	}
	return Item{}, fmt.Errorf("run %s step %d: %w", runID, step, ErrNoSuchStep)
}

// Decide approves or rejects a step. The status is 202 for a decision
// accepted now and 200 for a repeat of the decision of record.
func (c *Client) Decide(ctx context.Context, runID string, step int64, d workflows.Decision, req DecideRequest) (DecideResponse, int, error) {
	var out DecideResponse
	path := "/v1/runs/" + url.PathEscape(runID) + "/steps/" + strconv.FormatInt(step, 10) + "/" + url.PathEscape(string(d))
	status, err := c.do(ctx, http.MethodPost, path, req, &out)
	return out, status, err
}

// Edit approves a step with other arguments (POST
// /v1/runs/{run}/steps/{n}/edit) and returns the decision with the HTTP
// status (202 accepted, 200 a repeat).
func (c *Client) Edit(ctx context.Context, runID string, step int64, req EditRequest) (DecideResponse, int, error) {
	var res DecideResponse
	status, err := c.do(ctx, http.MethodPost, "/v1/runs/"+url.PathEscape(runID)+"/steps/"+strconv.FormatInt(step, 10)+"/edit", req, &res)
	return res, status, err
}

// Resolve answers whether the effect of a step whose outcome is unknown
// happened. The response's Repeated is true when the same answer had been
// given before; its Resolution is then the original.
func (c *Client) Resolve(ctx context.Context, runID string, step int64, req ResolveRequest) (ResolveResponse, error) {
	var out ResolveResponse
	path := "/v1/runs/" + url.PathEscape(runID) + "/steps/" + strconv.FormatInt(step, 10) + "/resolve"
	_, err := c.do(ctx, http.MethodPost, path, req, &out)
	return out, err
}

// Answer answers the questions a step's server asked (POST
// /v1/runs/{run}/steps/{step}/answer) and returns the answer of record.
func (c *Client) Answer(ctx context.Context, runID string, step int64, req AnswerRequest) (AnswerResponse, error) {
	var out AnswerResponse
	path := "/v1/runs/" + url.PathEscape(runID) + "/steps/" + strconv.FormatInt(step, 10) + "/answer"
	_, err := c.do(ctx, http.MethodPost, path, req, &out)
	return out, err
}

// Cancel cancels a run (POST /v1/runs/{run}/cancel) and returns its state
// and receipt; cancelling a cancelled run answers its receipt again.
func (c *Client) Cancel(ctx context.Context, runID string, req ControlRequest) (CancelResponse, error) {
	var out CancelResponse
	_, err := c.do(ctx, http.MethodPost, "/v1/runs/"+url.PathEscape(runID)+"/cancel", req, &out)
	return out, err
}

// Pause pauses a run (POST /v1/runs/{run}/pause) and returns its state
// and the pause in force.
func (c *Client) Pause(ctx context.Context, runID string, req ControlRequest) (PauseResponse, error) {
	var out PauseResponse
	_, err := c.do(ctx, http.MethodPost, "/v1/runs/"+url.PathEscape(runID)+"/pause", req, &out)
	return out, err
}

// Resume resumes a paused run (POST /v1/runs/{run}/resume) and returns its
// state.
func (c *Client) Resume(ctx context.Context, runID string, req ControlRequest) (PauseResponse, error) {
	var out PauseResponse
	_, err := c.do(ctx, http.MethodPost, "/v1/runs/"+url.PathEscape(runID)+"/resume", req, &out)
	return out, err
}

// Message gives a run a message for its planner's next turn (POST
// /v1/runs/{run}/messages) and returns its receipt; Duplicate is set when
// the run had accepted the message id before.
func (c *Client) Message(ctx context.Context, runID string, req MessageRequest) (MessageResponse, error) {
	var out MessageResponse
	_, err := c.do(ctx, http.MethodPost, "/v1/runs/"+url.PathEscape(runID)+"/messages", req, &out)
	return out, err
}

// Limits lists the token's tenant's spend caps with their usage (GET
// /v1/limits).
func (c *Client) Limits(ctx context.Context) ([]Limit, error) {
	var out LimitList
	_, err := c.do(ctx, http.MethodGet, "/v1/limits", nil, &out)
	return out.Limits, err
}

// SetLimit creates or replaces the tenant's cap name (PUT
// /v1/limits/{name}; an operator's token) and returns it with its usage.
func (c *Client) SetLimit(ctx context.Context, name string, req LimitRequest) (Limit, error) {
	var out Limit
	_, err := c.do(ctx, http.MethodPut, "/v1/limits/"+url.PathEscape(name), req, &out)
	return out, err
}

// DeleteLimit removes the tenant's cap name (DELETE /v1/limits/{name}; an
// operator's token): an *APIError with status 404 when there is none.
func (c *Client) DeleteLimit(ctx context.Context, name string) error {
	_, err := c.do(ctx, http.MethodDelete, "/v1/limits/"+url.PathEscape(name), nil, nil)
	return err
}

// Events returns a page of a run's events and its children's after
// offset after (GET /v1/runs/{run}/events): at most limit, 0 for the
// service's default. Follow follows them as they come.
func (c *Client) Events(ctx context.Context, runID string, after int64, limit int) (EventPage, error) {
	var out EventPage
	q := url.Values{"after": {strconv.FormatInt(after, 10)}}
	if limit > 0 {
		q.Set("limit", strconv.Itoa(limit))
	}
	_, err := c.do(ctx, http.MethodGet, "/v1/runs/"+url.PathEscape(runID)+"/events?"+q.Encode(), nil, &out)
	return out, err
}

// TenantEvents returns a page of the events of every run of the token's
// tenant after cursor after (GET /v1/events): at most limit, 0 for the
// service's default. An empty after starts at the oldest event kept.
func (c *Client) TenantEvents(ctx context.Context, after string, limit int) (TenantEventPage, error) {
	var out TenantEventPage
	q := url.Values{}
	if after != "" {
		q.Set("after", after)
	}
	if limit > 0 {
		q.Set("limit", strconv.Itoa(limit))
	}
	path := "/v1/events"
	if len(q) > 0 {
		path += "?" + q.Encode()
	}
	_, err := c.do(ctx, http.MethodGet, path, nil, &out)
	return out, err
}

func (c *Client) do(ctx context.Context, method, path string, in, out any) (int, error) {
	var body io.Reader
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return 0, fmt.Errorf("encode request: %w", err)
		}
		body = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, strings.TrimSuffix(c.BaseURL, "/")+path, body)
	if err != nil {
		// The error would repeat the URL, password included.
		return 0, fmt.Errorf("approvals API at %s (ONCERUN_API) is not a usable URL", untrusted.Redact(c.BaseURL))
	}
	req.Header.Set("Authorization", "Bearer "+c.Token)
	req.Header.Set("Accept", "application/json")
	if in != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	hc := c.HTTP
	if hc == nil {
		hc = &http.Client{Timeout: 30 * time.Second}
	}
	resp, err := hc.Do(req)
	if err != nil {
		// net/http shows the URL with its password masked.
		return 0, fmt.Errorf("approvals API (ONCERUN_API): %w", err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, 16<<20))
	if err != nil {
		return resp.StatusCode, fmt.Errorf("approvals API: read the response: %w", err)
	}
	if resp.StatusCode >= 300 {
		ae := &APIError{Status: resp.StatusCode, Code: "http_error", Message: strings.TrimSpace(string(raw[:min(len(raw), 200)]))}
		var eb ErrorBody
		if json.Unmarshal(raw, &eb) == nil && eb.Error.Code != "" {
			ae.Code, ae.Message = eb.Error.Code, eb.Error.Message
		}
		return resp.StatusCode, fmt.Errorf("approvals API: %w (HTTP %d, %s)", ae, ae.Status, ae.Code)
	}
	if out != nil {
		if err := json.Unmarshal(raw, out); err != nil {
			return resp.StatusCode, fmt.Errorf("approvals API: decode the response: %w", err)
		}
	}
	return resp.StatusCode, nil
}
