package inbox

import (
	"encoding/json"
	"net/http"
	"net/url"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/oncerun/oncerun/internal/keys"
	"github.com/oncerun/oncerun/internal/untrusted"
	"github.com/oncerun/oncerun/workflows"
)

// TestEveryRunIDARunCanStartWithIsReachable: a run id the service accepts
// can be named in a URL, however it is spelled, so that no run is started
// that the API and the inbox cannot reach.
func TestEveryRunIDARunCanStartWithIsReachable(t *testing.T) {
	t.Parallel()
	e := setupInbox(t)
	b := e.signIn("dana")
	ids := []string{"/", "//", "a/", "/a", "a/b", "acme/eu/1", "%2F", "%", "?", "#", "a?b=c", "a#b", "+", ";", "a;b",
		"a b", "...", ".a", "a.", "~", "@", "&", "=", "\\", "é", "東京-1", "a\"b", "<x>", "'", "[1]", "{}", "*", "$"}
	reached := 0
	for _, id := range ids {
		if untrusted.Name("run_id", id, keys.MaxRunIDLen) != nil {
			continue
		}
		reached++
		e.Temporal.SetStatus(workflows.Status{Tenant: "acme", RunID: id, Planner: "script", State: workflows.RunRunning})
		req, err := http.NewRequest(http.MethodGet, e.srv.URL+"/v1/runs/"+url.PathEscape(id), nil)
		require.NoError(t, err)
		req.Header.Set("Authorization", "Bearer "+e.Tokens["dana"])
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		var st workflows.Status
		err = json.NewDecoder(resp.Body).Decode(&st)
		resp.Body.Close()
		if assert.Equal(t, http.StatusOK, resp.StatusCode, "GET /v1/runs/%s for run id %q", url.PathEscape(id), id) {
			require.NoError(t, err)
			assert.Equal(t, id, st.RunID)
		}
		status, page := b.get("/runs/" + url.PathEscape(id))
		assert.Equal(t, http.StatusOK, status, "the inbox's page of run %q: %s", id, page)
	}
	assert.Greater(t, reached, 20, "most of the ids are accepted")
}
