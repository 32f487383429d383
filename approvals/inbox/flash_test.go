package inbox

import (
	"encoding/base64"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/oncerun/oncerun/internal/approvalstest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestInboxShowsNoMessageFromTheQueryString: a link that names a decision
// or an answer in its query string shows nothing of it.
func TestInboxShowsNoMessageFromTheQueryString(t *testing.T) {
	t.Parallel()
	e := setupInbox(t)
	b := e.signIn("dana")
	for _, q := range []url.Values{
		{"decided": {"approve"}, "run": {"made-up run"}, "step": {"Call +1 555 0100 to confirm"}},
		{"decided": {"edit"}, "run": {"made-up run"}, "step": {"7"}},
		{"resolved": {"applied"}, "run": {"made-up run"}, "step": {"7"}},
	} {
		status, page := b.get("/?" + q.Encode())
		require.Equal(t, http.StatusOK, status)
		assert.NotContains(t, page, "made-up run", "%s", q.Encode())
		assert.NotContains(t, page, `class="panel flash"`, "%s", q.Encode())
	}
}

// TestInboxShowsTheMessageOfWhatWasRecordedOnce: after a decision the
// inbox says what was recorded, from an HttpOnly, SameSite=Strict cookie
// of a minute that the page clears.
func TestInboxShowsTheMessageOfWhatWasRecordedOnce(t *testing.T) {
	t.Parallel()
	e := setupInbox(t)
	hash := e.Pending("r1", 2, "issue_credit", approvalstest.CreditArgs, 48*time.Hour, "")
	b := e.signIn("dana")

	status, h, _ := b.post("/runs/r1/steps/2/decide", url.Values{"csrf": {b.csrf}, "args_hash": {hash}, "decision": {"reject"}})
	require.Equal(t, http.StatusSeeOther, status)
	assert.Equal(t, "/", h.Get("Location"), "the message is not in the link")
	flash := flashOf(t, h)
	require.NotNil(t, flash)
	assert.True(t, flash.HttpOnly)
	assert.Equal(t, http.SameSiteStrictMode, flash.SameSite)
	assert.Equal(t, 60, flash.MaxAge)

	page := mustGet(t, b, "/")
	assert.Contains(t, page, `<div class="panel flash" role="status">You rejected step 2 of run r1.</div>`)
	assert.NotContains(t, mustGet(t, b, "/"), `class="panel flash"`, "shown once")
}

// TestInboxShowsNoFlashItDidNotSign: a flash cookie the inbox did not
// sign for this session shows nothing and is cleared: one planted
// unsigned, under either name, one whose message was changed under its
// signature, and another session's genuine one.
func TestInboxShowsNoFlashItDidNotSign(t *testing.T) {
	t.Parallel()
	e := setupInbox(t)
	hash := e.Pending("r1", 2, "issue_credit", approvalstest.CreditArgs, 48*time.Hour, "")
	other := e.signIn("dana")
	status, h, _ := other.post("/runs/r1/steps/2/decide", url.Values{"csrf": {other.csrf}, "args_hash": {hash}, "decision": {"reject"}})
	require.Equal(t, http.StatusSeeOther, status)
	genuine := flashOf(t, h)
	require.NotNil(t, genuine, "another session's flash")
	payload, sig, ok := cutLast(genuine.Value, ".")
	require.True(t, ok)
	exp, _, _ := strings.Cut(payload, ".")
	planted := base64.RawURLEncoding.EncodeToString([]byte("Call +1 555 0100 to confirm"))

	for _, tc := range []struct {
		name, cookie, value string
		cleared             bool
	}{
		{"unsigned", flashCookie, planted, true},
		{"unsigned, with the prefix", hostPrefix + flashCookie, planted, false},
		{"a message changed under its signature", flashCookie, exp + "." + planted + "." + sig, true},
		{"a signature changed", flashCookie, payload + "." + base64.RawURLEncoding.EncodeToString(make([]byte, 32)), true},
		{"another session's", flashCookie, genuine.Value, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			b := e.signIn("dana")
			u, err := url.Parse(e.URL)
			require.NoError(t, err)
			b.http.Jar.SetCookies(u, []*http.Cookie{{Name: tc.cookie, Value: tc.value, Path: "/"}})
			resp, err := b.http.Get(e.URL + "/")
			require.NoError(t, err)
			defer resp.Body.Close()
			body, err := io.ReadAll(resp.Body)
			require.NoError(t, err)
			require.Equal(t, http.StatusOK, resp.StatusCode)
			assert.NotContains(t, string(body), `class="panel flash"`)
			assert.NotContains(t, string(body), "555 0100")
			assert.NotContains(t, string(body), "You rejected")
			if tc.cleared {
				cleared := flashOf(t, resp.Header)
				require.NotNil(t, cleared, "the cookie is cleared")
				assert.Negative(t, cleared.MaxAge)
			}
		})
	}
}

// flashOf is the flash cookie a response sets, if any.
func flashOf(t *testing.T, h http.Header) *http.Cookie {
	t.Helper()
	for _, c := range (&http.Response{Header: h}).Cookies() {
		if c.Name == flashCookie {
			return c
		}
	}
	return nil
}

// TestInboxCookiesOverTLSHaveTheHostPrefix: over TLS the session's
// cookies are __Host- cookies (Secure, Path=/, no Domain), and only that
// name signs a browser in; a bare oncerun_token, which a plain-HTTP page
// or a sibling host could set, is not read.
func TestInboxCookiesOverTLSHaveTheHostPrefix(t *testing.T) {
	t.Parallel()
	e := setupInbox(t)
	serve := func(method, path, body string, cookies ...*http.Cookie) *http.Response {
		req := httptest.NewRequest(method, "https://inbox.example"+path, strings.NewReader(body))
		if body != "" {
			req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		}
		for _, c := range cookies {
			req.AddCookie(c)
		}
		rec := httptest.NewRecorder()
		e.srv.Config.Handler.ServeHTTP(rec, req)
		return rec.Result()
	}

	resp := serve(http.MethodPost, "/login", url.Values{"token": {e.Tokens["dana"]}}.Encode())
	require.Equal(t, http.StatusSeeOther, resp.StatusCode)
	var names []string
	for _, c := range resp.Cookies() {
		names = append(names, c.Name)
		assert.True(t, c.Secure, c.Name)
		assert.Equal(t, "/", c.Path, c.Name)
		assert.Empty(t, c.Domain, c.Name)
	}
	assert.ElementsMatch(t, []string{"__Host-oncerun_token", "__Host-oncerun_csrf"}, names)

	var csrf string
	for _, c := range resp.Cookies() {
		if c.Name == "__Host-oncerun_csrf" {
			csrf = c.Value
		}
	}
	token := e.Tokens["dana"]
	assert.Equal(t, http.StatusOK, serve(http.MethodGet, "/", "", &http.Cookie{Name: "__Host-oncerun_token", Value: token},
		&http.Cookie{Name: "__Host-oncerun_csrf", Value: csrf}).StatusCode)
	assert.Equal(t, http.StatusSeeOther, serve(http.MethodGet, "/", "", &http.Cookie{Name: "oncerun_token", Value: token},
		&http.Cookie{Name: "oncerun_csrf", Value: csrf}).StatusCode, "the bare names are not read over TLS")
}

// TestAFlashPastItsMinuteIsNotShown: the inbox's own flash, signed for
// the session, shows until its expiry and not after; an expiry moved
// later under the signature shows nothing either.
func TestAFlashPastItsMinuteIsNotShown(t *testing.T) {
	t.Parallel()
	s := &Inbox{flashKey: []byte("0123456789abcdef0123456789abcdef")}
	r := httptest.NewRequest(http.MethodGet, "/", nil)
	r.AddCookie(&http.Cookie{Name: csrfCookie, Value: "session-csrf"})
	now := time.Date(2026, 12, 7, 12, 0, 0, 0, time.UTC)
	value := s.sealFlash(r, "You approved step 2 of run r1.", now.Add(flashAge))

	msg, ok := s.openFlash(r, value, now.Add(flashAge-time.Second))
	assert.True(t, ok)
	assert.Equal(t, "You approved step 2 of run r1.", msg)
	_, ok = s.openFlash(r, value, now.Add(flashAge))
	assert.False(t, ok, "at its expiry")
	_, ok = s.openFlash(r, value, now.Add(time.Hour))
	assert.False(t, ok, "an hour later")

	payload, sig, _ := cutLast(value, ".")
	_, rest, _ := strings.Cut(payload, ".")
	later := strconv.FormatInt(now.Add(time.Hour).Unix(), 10) + "." + rest + "." + sig
	_, ok = s.openFlash(r, later, now.Add(2*flashAge))
	assert.False(t, ok, "an expiry moved under the signature")
}
