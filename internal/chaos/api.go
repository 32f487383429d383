package chaos

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"time"
)

// apiClient speaks to a JSON HTTP API with a bearer token, as any client
// of oncerun's approvals API or of the payment provider would.
type apiClient struct {
	base  string
	token string
	http  *http.Client
}

func newAPIClient(base, token string) *apiClient {
	return &apiClient{base: base, token: token, http: &http.Client{Timeout: 30 * time.Second}}
}

// answer is an HTTP answer; status 0 means the request got none.
type answer struct {
	status int
	body   []byte
	err    error
}

func (a answer) String() string {
	if a.err != nil {
		return a.err.Error()
	}
	return fmt.Sprintf("%d %s", a.status, bytes.TrimSpace(a.body))
}

func (c *apiClient) do(ctx context.Context, method, path string, body any) answer {
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return answer{err: err}
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.base+path, rd)
	if err != nil {
		return answer{err: err}
	}
	req.Header.Set("Authorization", "Bearer "+c.token)
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return answer{err: err}
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return answer{status: resp.StatusCode, body: b, err: err}
}

// get decodes a 200 answer into v.
func (c *apiClient) get(ctx context.Context, path string, v any) error {
	a := c.do(ctx, http.MethodGet, path, nil)
	if a.err != nil {
		return a.err
	}
	if a.status != http.StatusOK {
		return fmt.Errorf("GET %s: %s", path, a)
	}
	return json.Unmarshal(a.body, v)
}
