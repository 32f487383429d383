package approvals

import (
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/oncerun/oncerun/internal/approvalstest"
	"github.com/oncerun/oncerun/workflows"
)

// setupCheck serves the API on a world with the gift desk's tools and
// steps (approvalstest.GiftTools).
func setupCheck(t *testing.T, desk *approvalstest.GiftDesk) *apiEnv {
	t.Helper()
	reg := approvalstest.GiftTools(t, desk)
	e := setupAPI(t, func(c *Config) { c.Tools = reg })
	e.Reg = reg
	e.RecordGiftSteps()
	return e
}

// TestCheckWithTheProviderAgain: POST …/check runs the step's paired read
// now, under its key. Found, the step is answered applied with the
// provider's record, once, by the person who asked; not found, nothing is
// answered; a read that fails is 502 and answers nothing; a viewer, a
// tool without a paired read and a step that waits for nothing are
// refused.
func TestCheckWithTheProviderAgain(t *testing.T) {
	t.Parallel()
	desk := &approvalstest.GiftDesk{}
	e := setupCheck(t, desk)

	status, _, body := e.Call("dana", http.MethodPost, "/v1/runs/r1/steps/2/check", "")
	require.Equal(t, http.StatusOK, status, body)
	var res CheckResponse
	require.NoError(t, json.Unmarshal([]byte(body), &res))
	assert.False(t, res.Found)
	assert.Nil(t, res.Resolution)
	assert.Zero(t, e.Answers("r1"), "not found answers nothing: that is the person's call")

	desk.Set(false, errors.New("provider answered 503"))
	status, _, body = e.Call("dana", http.MethodPost, "/v1/runs/r1/steps/2/check", "")
	assert.Equal(t, http.StatusBadGateway, status, body)
	assert.Contains(t, body, `"provider_unavailable"`)
	assert.Contains(t, body, "provider answered 503")

	desk.Set(true, nil)
	status, _, body = e.Call("dana", http.MethodPost, "/v1/runs/r1/steps/2/check", "")
	require.Equal(t, http.StatusOK, status, body)
	res = CheckResponse{}
	require.NoError(t, json.Unmarshal([]byte(body), &res))
	require.True(t, res.Found)
	require.NotNil(t, res.Resolution)
	assert.Equal(t, workflows.OutcomeApplied, res.Resolution.Outcome)
	assert.Equal(t, "dana", res.Resolution.Resolver)
	assert.JSONEq(t, string(res.Record), string(res.Resolution.Result), "the provider's record is the result")
	assert.Contains(t, strings.Join(strings.Fields(string(res.Record)), ""), `"amount_cents":2500`)
	assert.Equal(t, 1, e.Answers("r1"))
	assert.Equal(t, []string{"v1/acme/r1/2/send_gift", "v1/acme/r1/2/send_gift", "v1/acme/r1/2/send_gift"}, desk.Reads(), "asked under the step's key")

	status, _, body = e.Call("vic", http.MethodPost, "/v1/runs/r1/steps/2/check", "")
	assert.Equal(t, http.StatusForbidden, status, body)
	status, _, body = e.Call("dana", http.MethodPost, "/v1/runs/r2/steps/2/check", "")
	assert.Equal(t, http.StatusConflict, status, body)
	assert.Contains(t, body, "post_card has no paired read")
	status, _, body = e.Call("dana", http.MethodPost, "/v1/runs/r9/steps/2/check", "")
	assert.Equal(t, http.StatusNotFound, status, body)
	status, _, body = e.Call("omar", http.MethodPost, "/v1/runs/r1/steps/2/check", "")
	assert.Equal(t, http.StatusNotFound, status, "another tenant's step is not seen: %s", body)
}
