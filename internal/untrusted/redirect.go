package untrusted

import (
	"fmt"
	"net/http"
	"net/url"
	"strings"
)

// Redirects says which HTTP redirects a client of oncerun's follows. Go's
// http.Client follows up to ten by default, to any host: it drops the
// Authorization header it was given on the way to another domain, but not
// one a RoundTripper adds to every request, nor an Idempotency-Key, and a
// 307 or 308 sends the body again. A credential configured for one origin
// must reach no other.
type Redirects int

const (
	// NoRedirects follows none: a redirect is refused.
	NoRedirects Redirects = iota
	// SameOriginRedirects follows a redirect only to the origin (scheme,
	// host and port) of the request it answers, and only when the request
	// goes on as it was sent: a 307 or 308, which keep the method and the
	// body, or any redirect of a GET or HEAD. A POST that a 301, 302 or 303
	// would turn into a GET is refused.
	SameOriginRedirects
)

// maxRedirects is how many redirects SameOriginRedirects follows for one
// request, as Go's client does by default.
const maxRedirects = 10

// RedirectError is a redirect that was refused.
type RedirectError struct {
	// Status is the redirect's HTTP status.
	Status int
	// Target is where it led: its origin only ([Origin]), as the path and
	// the query of a URL may hold a secret (a webhook's path often does,
	// and a redirect from http to https keeps it).
	Target string
	// Reason says why it was not followed.
	Reason string
}

// Error names the status, the target's origin and the reason.
func (e *RedirectError) Error() string {
	return fmt.Sprintf("refused a redirect (HTTP %d) to %s: %s", e.Status, e.Target, e.Reason)
}

// Repeat reports whether the redirect asked for the same request to be
// sent again at its target (307, 308): by HTTP's rules the server that
// answered it did not act on the request. A 301, 302 or 303 may answer a
// request the server acted on (a 303 is what a server answers after a POST
// it ran, to show the result elsewhere).
func (e *RedirectError) Repeat() bool {
	return e.Status == http.StatusTemporaryRedirect || e.Status == http.StatusPermanentRedirect
}

// Check returns a *RedirectError when resp is a redirect that r does not
// follow, and nil when r follows it or resp is no redirect Go's client
// would follow (another status, no Location).
func (r Redirects) Check(resp *http.Response) error {
	switch resp.StatusCode {
	case http.StatusMovedPermanently, http.StatusFound, http.StatusSeeOther,
		http.StatusTemporaryRedirect, http.StatusPermanentRedirect:
	default:
		return nil
	}
	target, err := resp.Location()
	if err != nil || resp.Request == nil {
		return nil
	}
	refuse := func(reason string) error {
		return &RedirectError{Status: resp.StatusCode, Target: Origin(target), Reason: reason}
	}
	from := resp.Request
	switch {
	case r == NoRedirects:
		return refuse("redirects are not followed")
	case !SameOrigin(from.URL, target):
		return refuse("it leads to another origin than " + Origin(from.URL) + ", where credentials are not sent")
	case resp.StatusCode != http.StatusTemporaryRedirect && resp.StatusCode != http.StatusPermanentRedirect &&
		from.Method != http.MethodGet && from.Method != http.MethodHead:
		return refuse("it would turn the " + from.Method + " into a GET without its body")
	}
	return nil
}

// CheckRedirect is r as an http.Client's CheckRedirect: req is the request
// the redirect (req.Response) would make.
func (r Redirects) CheckRedirect(req *http.Request, via []*http.Request) error {
	if req.Response == nil {
		return nil
	}
	if err := r.Check(req.Response); err != nil {
		return err
	}
	if len(via) >= maxRedirects {
		return &RedirectError{Status: req.Response.StatusCode, Target: Origin(req.URL),
			Reason: fmt.Sprintf("stopped after %d redirects", maxRedirects)}
	}
	return nil
}

// SameOrigin reports whether a and b have the same origin: the same scheme,
// host and port, a missing port being the scheme's default.
func SameOrigin(a, b *url.URL) bool {
	return strings.EqualFold(a.Scheme, b.Scheme) && strings.EqualFold(a.Hostname(), b.Hostname()) && port(a) == port(b)
}

// Origin is u's scheme, host and port, such as https://mcp.example.com:8443:
// the part of a URL that holds no credential.
func Origin(u *url.URL) string {
	return strings.ToLower(u.Scheme) + "://" + strings.ToLower(u.Host)
}

func port(u *url.URL) string {
	if p := u.Port(); p != "" {
		return p
	}
	switch strings.ToLower(u.Scheme) {
	case "http":
		return "80"
	case "https":
		return "443"
	}
	return ""
}
