package untrusted

import (
	"errors"
	"net/http"
	"net/url"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// redirect is a status answered to method at from, pointing to location.
func redirect(t *testing.T, method, from string, status int, location string) *http.Response {
	t.Helper()
	req, err := http.NewRequest(method, from, nil)
	require.NoError(t, err)
	return &http.Response{StatusCode: status, Header: http.Header{"Location": {location}}, Request: req}
}

func TestRedirectsFollowOnlyWhatGoesOnAsSentToTheSameOrigin(t *testing.T) {
	t.Parallel()
	const from = "https://u:s3cret@mcp.example.com/mcp"
	for _, tc := range []struct {
		name     string
		policy   Redirects
		method   string
		status   int
		location string
		refused  string // part of the reason; empty: followed
	}{
		{"same origin 307", SameOriginRedirects, "POST", 307, "/mcp/", ""},
		{"same origin 308, port spelt out", SameOriginRedirects, "POST", 308, "https://MCP.example.com:443/mcp/", ""},
		{"same origin 302 of a GET", SameOriginRedirects, "GET", 302, "/elsewhere", ""},
		{"another host", SameOriginRedirects, "POST", 307, "https://evil.example.net/mcp", "another origin than https://mcp.example.com"},
		{"a subdomain", SameOriginRedirects, "GET", 301, "https://a.mcp.example.com/mcp", "another origin"},
		{"another port", SameOriginRedirects, "POST", 307, "https://mcp.example.com:8443/mcp", "another origin"},
		{"another scheme", SameOriginRedirects, "POST", 308, "http://mcp.example.com/mcp", "another origin"},
		{"same origin 303 of a POST", SameOriginRedirects, "POST", 303, "/result", "turn the POST into a GET"},
		{"same origin 302 of a POST", SameOriginRedirects, "POST", 302, "/result", "turn the POST into a GET"},
		{"none: same origin 307", NoRedirects, "POST", 307, "/mcp/", "not followed"},
		{"none: same origin 302 of a GET", NoRedirects, "GET", 302, "/x", "not followed"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			err := tc.policy.Check(redirect(t, tc.method, from, tc.status, tc.location))
			if tc.refused == "" {
				assert.NoError(t, err)
				return
			}
			var re *RedirectError
			require.True(t, errors.As(err, &re), "refused: %v", err)
			assert.Equal(t, tc.status, re.Status)
			assert.Contains(t, err.Error(), tc.refused)
			assert.NotContains(t, err.Error(), "s3cret")
		})
	}
}

func TestARefusedRedirectNamesItsTargetsOriginOnly(t *testing.T) {
	t.Parallel()
	resp := redirect(t, "POST", "http://127.0.0.1:1/hook", 307, "https://u:s3cret@127.0.0.1:2/hooks/s3cret?token=s3cret")

	err := NoRedirects.Check(resp)

	require.Error(t, err)
	assert.Equal(t, "refused a redirect (HTTP 307) to https://127.0.0.1:2: redirects are not followed", err.Error())
}

func TestRedirectsLeaveOtherAnswersAlone(t *testing.T) {
	t.Parallel()
	for _, status := range []int{200, 300, 304, 404, 500} {
		assert.NoError(t, NoRedirects.Check(redirect(t, "POST", "http://127.0.0.1:1/", status, "http://127.0.0.1:2/")), status)
	}
	noLocation := redirect(t, "POST", "http://127.0.0.1:1/", 307, "")
	noLocation.Header.Del("Location")
	assert.NoError(t, NoRedirects.Check(noLocation), "Go's client does not follow it: the 307 is the answer")
}

func TestRepeatIsTheRedirectsThatSayTheRequestWasNotActedOn(t *testing.T) {
	t.Parallel()
	for status, repeat := range map[int]bool{301: false, 302: false, 303: false, 307: true, 308: true} {
		assert.Equal(t, repeat, (&RedirectError{Status: status}).Repeat(), status)
	}
}

func TestSameOrigin(t *testing.T) {
	t.Parallel()
	parse := func(s string) *url.URL {
		u, err := url.Parse(s)
		require.NoError(t, err)
		return u
	}
	assert.True(t, SameOrigin(parse("http://h/a"), parse("HTTP://H:80/b?x=1")))
	assert.True(t, SameOrigin(parse("https://u:p@h/a"), parse("https://h:443/")))
	assert.False(t, SameOrigin(parse("http://h/"), parse("https://h/")))
	assert.False(t, SameOrigin(parse("http://h:8080/"), parse("http://h/")))
	assert.False(t, SameOrigin(parse("http://h/"), parse("http://h.evil/")))
}
