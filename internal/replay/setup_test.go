package replay

import (
	"path/filepath"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"
	historypb "go.temporal.io/api/history/v1"

	"github.com/oncerun/oncerun/internal/shop"
	"github.com/oncerun/oncerun/tools"
)

// recorded is the folder of the histories the integration tests recorded
// (workflows/testdata/histories).
var recorded = filepath.Join("..", "..", "workflows", "testdata", "histories")

// history reads the recorded history name.
func history(t *testing.T, name string) *historypb.History {
	t.Helper()
	h, err := ReadFile(filepath.Join(recorded, name))
	require.NoError(t, err)
	return h
}

// upTo is h cut after event last: the history as it stood then.
func upTo(t *testing.T, h *historypb.History, last int64) *historypb.History {
	t.Helper()
	for i, e := range h.GetEvents() {
		if e.GetEventId() == last {
			h.Events = h.Events[:i+1]
			return h
		}
	}
	t.Fatalf("the history has no event %d", last)
	return nil
}

// registry is the registry of the demo shop's tools but those named in
// without.
func registry(t *testing.T, without ...string) *tools.Registry {
	t.Helper()
	all := slices.DeleteFunc(shop.Tools(shop.Config{}), func(tl tools.Tool) bool { return slices.Contains(without, tl.Name) })
	reg, err := tools.NewRegistry(tools.RegistryConfig{}, all...)
	require.NoError(t, err)
	return reg
}
