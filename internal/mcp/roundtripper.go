package mcp

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptrace"
	"net/url"
	"strings"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"

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
		if st.live != nil && strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
			// The server's requests on the call's answer stream belong to
			// the call: a live question among them is put to a person
			// through it.
			resp.Body = &streamTap{ReadCloser: resp.Body, saw: st.live.sawRequest}
		}
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

// maxTappedLine bounds the line streamTap keeps: a request longer than
// this is not recognised (its question is then refused as one tied to no
// call), and a server cannot make the worker hold more.
const maxTappedLine = 1 << 20

// streamTap reads a call's answer stream (server-sent events) as the SDK
// reads it, and reports the id of each request the server sends on it. It
// changes nothing of what is read.
type streamTap struct {
	io.ReadCloser
	saw  func(id string)
	line []byte
	data []byte
}

func (t *streamTap) Read(p []byte) (int, error) {
	n, err := t.ReadCloser.Read(p)
	for _, b := range p[:n] {
		if b != '\n' {
			if len(t.line) < maxTappedLine {
				t.line = append(t.line, b)
			}
			continue
		}
		t.endLine()
	}
	return n, err
}

// endLine takes one line of the stream: a data line adds to the event's
// data, a blank line ends the event.
func (t *streamTap) endLine() {
	line := bytes.TrimSuffix(t.line, []byte("\r"))
	t.line = t.line[:0]
	switch {
	case len(line) == 0:
		if len(t.data) > 0 {
			if msg, err := jsonrpc.DecodeMessage(t.data); err == nil {
				if req, ok := msg.(*jsonrpc.Request); ok && req.IsCall() {
					t.saw(fmt.Sprint(req.ID.Raw()))
				}
			}
		}
		t.data = t.data[:0]
	case bytes.HasPrefix(line, []byte("data:")) && len(t.data)+len(line) <= maxTappedLine:
		if len(t.data) > 0 {
			t.data = append(t.data, '\n')
		}
		t.data = append(t.data, bytes.TrimPrefix(bytes.TrimPrefix(line, []byte("data:")), []byte(" "))...)
	}
}
