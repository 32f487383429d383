package inbox

import (
	"net/http"
	"net/url"
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
	resp := http.Response{Header: h}
	var flash *http.Cookie
	for _, c := range resp.Cookies() {
		if c.Name == flashCookie {
			flash = c
		}
	}
	require.NotNil(t, flash)
	assert.True(t, flash.HttpOnly)
	assert.Equal(t, http.SameSiteStrictMode, flash.SameSite)
	assert.Equal(t, 60, flash.MaxAge)

	page := mustGet(t, b, "/")
	assert.Contains(t, page, `<div class="panel flash" role="status">You rejected step 2 of run r1.</div>`)
	assert.NotContains(t, mustGet(t, b, "/"), `class="panel flash"`, "shown once")
}
