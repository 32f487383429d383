package integration

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/worker"

	"github.com/oncerun/oncerun/internal/openapiclient"
	"github.com/oncerun/oncerun/workflows"
)

// TestOpenAPIClientWalkthrough runs internal/openapiclient's walkthrough,
// the TypeScript client generated from approvals/openapi.json, with node
// against the approvals service, a worker, Temporal and PostgreSQL: an
// operator starts a refund, an approver approves its credit from the
// approvals list, and the run is read until it has completed.
func TestOpenAPIClientWalkthrough(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	dir, err := openapiclient.Install(ctx)
	if errors.Is(err, openapiclient.ErrNoNode) {
		t.Skip(err)
	}
	require.NoError(t, err)
	e := setup(t)
	e.startWorker("w", worker.Options{})
	a := e.serveApprovals(nil)
	run := e.id("openapi")

	cmd := exec.CommandContext(ctx, "node", "walkthrough.mjs")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "ONCERUN_API="+a.srv.URL, "ONCERUN_RUN_ID="+run,
		"ONCERUN_OPERATOR_TOKEN="+a.tokens["ops"], "ONCERUN_APPROVER_TOKEN="+a.tokens["dana"])
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "%s", out)
	t.Logf("walkthrough:\n%s", out)
	assert.Contains(t, string(out), "refused: forbidden")
	assert.Contains(t, string(out), "pending: step 2 issue_credit (259.00 EUR)")
	assert.Contains(t, string(out), "completed: "+run)

	st := e.status("acme", run)
	assert.Equal(t, workflows.RunCompleted, st.State)
	require.Len(t, st.Steps, 2)
	require.NotNil(t, st.Steps[1].Approval)
	assert.Equal(t, "dana", st.Steps[1].Approval.Approver)
	assert.Equal(t, "the photos show the damage", st.Steps[1].Approval.Comment)
}
