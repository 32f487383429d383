package mcp

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptrace"
	"net/url"

	"github.com/oncerun/oncerun/internal/untrusted"
)

// roundTripper sends the requests of an http server's session. It puts the
// configured URL, credentials and all, in place of the redacted one the SDK
// holds; it adds the bearer token (or, without one, the URL's user-info as
// Basic credentials) to every request and, to a tools/call request, the
// step's key as the Idempotency-Key header; it records whether that request
// was written and how it was answered. It refuses a redirect to another
// origin, and one that would turn a POST into a GET
// (untrusted.SameOriginRedirects): Go's client would send the next request
// through it, token and key added again, wherever the Location points. The
// refusal is its error rather than the client's CheckRedirect's, which the
// client would report under the Location as the server sent it.
type roundTripper struct {
	base   http.RoundTripper
	bearer string
	// shown is the endpoint as the SDK holds it, redacted; requests to it
	// go to configured, the URL of the configuration.
	shown      string
	configured *url.URL
	// keyHeader sends the step's key as the Idempotency-Key header.
	keyHeader bool
}

// newRoundTripper returns the roundTripper of the server at endpoint
// (validated by Config.Validate), sending bearer when it is not empty and
// the key as the Idempotency-Key header when keyHeader is set.
func newRoundTripper(base http.RoundTripper, endpoint, bearer string, keyHeader bool) *roundTripper {
	rt := &roundTripper{base: base, bearer: bearer, keyHeader: keyHeader}
	configured, err := url.Parse(endpoint)
	if err != nil {
		return rt
	}
	if shown, err := url.Parse(untrusted.Redact(endpoint)); err == nil {
		rt.shown, rt.configured = shown.String(), configured
	}
	return rt
}

func (rt *roundTripper) RoundTrip(req *http.Request) (*http.Response, error) {
	st := callStateOf(req.Context())
	ctx := req.Context()
	isCall := st != nil && isToolsCall(req)
	if isCall {
		// Each request of a followed redirect is classified anew: only a
		// 307 or 308 is followed for a POST, and the server that answered
		// it did not act on the request, so what the call did is what
		// became of the last request.
		st.sent.Store(false)
		st.status.Store(0)
		ctx = httptrace.WithClientTrace(ctx, &httptrace.ClientTrace{
			// The headers are handed to the connection: from here on the
			// server may see the request.
			WroteHeaders: func() { st.sent.Store(true) },
		})
	}
	req = req.Clone(ctx)
	if rt.configured != nil && req.URL.String() == rt.shown {
		u := *rt.configured
		u.User = nil
		req.URL = &u
	}
	switch {
	case rt.bearer != "":
		req.Header.Set("Authorization", "Bearer "+rt.bearer)
	case rt.configured != nil && rt.configured.User != nil:
		// What Go's client sends for the user-info of a URL.
		pass, _ := rt.configured.User.Password()
		req.SetBasicAuth(rt.configured.User.Username(), pass)
	}
	if isCall && rt.keyHeader {
		req.Header.Set("Idempotency-Key", st.key)
	}
	resp, err := rt.base.RoundTrip(req)
	if err != nil {
		return nil, err
	}
	if isCall {
		st.status.Store(int32(resp.StatusCode))
	}
	if err := untrusted.SameOriginRedirects.Check(resp); err != nil {
		resp.Body.Close()
		return nil, err
	}
	return resp, nil
}

// isToolsCall reports whether req posts a tools/call request. The SDK sends
// other messages with the call's context too (a cancellation notice).
func isToolsCall(req *http.Request) bool {
	if req.Method != http.MethodPost {
		return false
	}
	if req.GetBody == nil {
		return true // cannot tell: treat it as the call, the safer side
	}
	body, err := req.GetBody()
	if err != nil {
		return true
	}
	defer body.Close()
	raw, err := io.ReadAll(body)
	if err != nil {
		return true
	}
	var msg struct {
		Method string `json:"method"`
	}
	if json.Unmarshal(bytes.TrimSpace(raw), &msg) != nil {
		return true
	}
	return msg.Method == "tools/call"
}
