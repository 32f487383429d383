package inbox

import (
	"context"
	"encoding/json"
	"regexp"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/oncerun/oncerun/workflows"
)

func TestVisible(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		page string
		want string
	}{
		{"a page without them is unchanged", `<p title="a">b</p>`, `<p title="a">b</p>`},
		{"text", "<p>pay\u202eevil</p>", `<p>pay\u202eevil</p>`},
		{"zero-width space, escape and a byte that is not UTF-8", "<dd>a\u200bb\x1b[31mc\xffd</dd>", `<dd>a\u200bb\u001b[31mc\xffd</dd>`},
		{"an attribute", "<article data-run=\"r\u202e1\" id=\"x\">", `<article data-run="r\u202e1" id="x">`},
		{"a form value is sent back as it is", "<input type=\"text\" name=\"arg.n\" value=\"a\u202eb\" readonly>", "<input type=\"text\" name=\"arg.n\" value=\"a\u202eb\" readonly>"},
		{"a form value beside an attribute that changes", "<input data-arg=\"a\u202eb\" value=\"a\u202eb\">", "<input data-arg=\"a\\u202eb\" value=\"a\u202eb\">"},
		{"a textarea's text is sent back as it is", "<textarea name=\"c\">a\u202eb</textarea><p>a\u202eb</p>", "<textarea name=\"c\">a\u202eb</textarea><p>a\\u202eb</p>"},
		{"html/template's escapes stay", "<p title=\"&#34;\u202e\">&lt;b&gt;\u202e</p>", `<p title="&#34;\u202e">&lt;b&gt;\u202e</p>`},
		{"newlines and tabs stay", "<pre>a\n\tb\u202e</pre>", "<pre>a\n\tb\\u202e</pre>"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			assert.Equal(t, tt.want, string(visible([]byte(tt.page))))
		})
	}
}

// hiddenOutsideForms finds a character visible escapes in a page, but in
// form values and textareas.
func hiddenOutsideForms(page string) []string {
	rest := regexp.MustCompile(`(?s) value="[^"]*"|<textarea[^>]*>.*?</textarea>`).ReplaceAllString(page, "")
	return regexp.MustCompile("[\u202e\u200b\x1b]").FindAllString(rest, -1)
}

func TestInboxShowsControlAndFormatCharactersEscaped(t *testing.T) {
	t.Parallel()
	e := setupInbox(t)
	prior := workflows.Step{Step: 1, Tool: "lookup_order", Class: "read", Args: json.RawMessage(`{"order_id":"1001\u202e"}`),
		State: workflows.StepDone, Result: json.RawMessage(`{"note":"\u001b[2Jcleared \u200bhidden"}`),
		PlannedAt: e.Now.Add(-2 * time.Hour), FinishedAt: e.Now.Add(-2 * time.Hour)}
	e.Pending("r1", 2, "tune_widget", `{"name":"pay\u202eevil","count":3}`, 48*time.Hour, "", prior)
	_, err := e.Pool.Exec(context.Background(), `UPDATE approvals SET goal = $1`, "refund\u202e 1001")
	require.NoError(t, err)

	page := mustGet(t, e.signIn("dana"), "/")
	c := card(t, page, "r1", 2)
	assert.Contains(t, c, `<p class="meta">Goal: refund\u202e 1001</p>`)
	assert.Contains(t, c, `<dt>name</dt><dd>pay\u202eevil</dd>`, "the argument")
	assert.Contains(t, c, `note: \u001b[2Jcleared \u200bhidden`, "an earlier step's result")
	assert.Empty(t, hiddenOutsideForms(page))
	assert.Contains(t, c, "name=\"arg.name\" value=\"pay\u202eevil\"", "the edit form sends the argument back as it is")
	assert.Contains(t, c, hiddenHint)
}

func TestRunPageShowsControlAndFormatCharactersEscaped(t *testing.T) {
	t.Parallel()
	e := setupInbox(t)
	e.Temporal.SetStatus(workflows.Status{Tenant: "acme", RunID: "r1", Planner: "script", State: workflows.RunCompleted,
		Goal: "refund\u202e 1001", StartedAt: e.Now, UpdatedAt: e.Now,
		Steps: []workflows.Step{{Step: 1, Tool: "add_order_note", Class: "keyed", Args: json.RawMessage(`{"text":"ok\u202ekO"}`),
			State: workflows.StepDone, Result: json.RawMessage(`{"note":"\u001b]0;title\u0007"}`), PlannedAt: e.Now, FinishedAt: e.Now}}})

	page := mustGet(t, e.signIn("dana"), "/runs/r1")
	assert.Contains(t, page, `<p>Goal: refund\u202e 1001</p>`)
	assert.Contains(t, page, `<dd>ok\u202ekO</dd>`)
	assert.Contains(t, page, `Result: note: \u001b]0;title\u0007`)
	assert.Empty(t, hiddenOutsideForms(page))
}
