package payments

import (
	"net/http"
	"testing"

	"github.com/oncerun/oncerun/internal/httpserver/httpservertest"
)

// TestRunningRefusesLargeHeaders: the sandbox has the limits of every
// server of oncerun.
func TestRunningRefusesLargeHeaders(t *testing.T) {
	t.Parallel()
	httpservertest.RefusesLargeHeaders(t, http.MethodGet, setup(t).run.URL()+"/v1/refunds")
}
