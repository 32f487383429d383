package inbox

import (
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"testing"

	"github.com/oncerun/oncerun/approvals"
	"github.com/oncerun/oncerun/internal/approvalstest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// setupCheck serves the inbox on a world with the gift desk's tools and
// steps (approvalstest.GiftTools).
func setupCheck(t *testing.T, desk *approvalstest.GiftDesk) *inboxEnv {
	t.Helper()
	reg := approvalstest.GiftTools(t, desk)
	e := setupInbox(t, func(c *approvals.Config) { c.Tools = reg })
	e.Reg = reg
	e.RecordGiftSteps()
	return e
}

// TestNeedsResolutionCardLeadsWithOneSentence: the card of a step whose
// outcome is unknown says what happened in one sentence, with the amount
// as money; what was sent and the error chain are behind <details>; the
// "Check with the provider again" button asks the provider, and its
// answer comes back as the page's message.
func TestNeedsResolutionCardLeadsWithOneSentence(t *testing.T) {
	t.Parallel()
	desk := &approvalstest.GiftDesk{Found: true}
	e := setupCheck(t, desk)
	dana := e.signIn("dana")

	page := mustGet(t, dana, "/")
	card := regexp.MustCompile(`(?s)<article [^>]*data-run="r1" data-step="2" data-kind="outcome_unknown">.*?</article>`).FindString(page)
	require.NotEmpty(t, card, page)
	lead := regexp.MustCompile(`(?s)<p class="lead">(.*?)</p>`).FindStringSubmatch(card)
	require.NotNil(t, lead, card)
	assert.Contains(t, lead[1], "send_gift of 25.00 EUR was sent")
	assert.Contains(t, lead[1], "nobody could tell whether the provider applied it")
	assert.NotContains(t, lead[1], "i/o timeout", "the error chain is not the lead")
	details := regexp.MustCompile(`(?s)<details class="full"><summary>What we sent and what we know</summary>.*?</details>`).FindString(card)
	require.NotEmpty(t, details, card)
	assert.Contains(t, details, "i/o timeout after the request was sent")
	assert.Equal(t, 1, strings.Count(card, "i/o timeout"), "what we know is said once")
	assert.Contains(t, card, `<form method="post" action="/runs/r1/steps/2/check">`)
	assert.Contains(t, card, `Check with the provider again</button>`)
	other := regexp.MustCompile(`(?s)<article [^>]*data-run="r2" data-step="2" data-kind="outcome_unknown">.*?</article>`).FindString(page)
	require.NotEmpty(t, other, page)
	assert.NotContains(t, other, "Check with the provider again", "a tool without a paired read has nothing to ask")
	assert.NotContains(t, mustGet(t, e.signIn("vic"), "/"), "Check with the provider again", "a viewer may not resolve")

	status, _, _ := dana.post("/runs/r1/steps/2/check", url.Values{})
	assert.Equal(t, http.StatusForbidden, status, "without the session's CSRF token")
	assert.Zero(t, e.Answers("r1"))
	status, hdr, _ := dana.post("/runs/r1/steps/2/check", url.Values{"csrf": {dana.csrf}})
	require.Equal(t, http.StatusSeeOther, status)
	assert.Equal(t, "/", hdr.Get("Location"))
	assert.Contains(t, mustGet(t, dana, "/"), "The provider holds step 2 of run r1: it is answered applied, with the provider&#39;s record.")
	assert.Equal(t, 1, e.Answers("r1"))
}
