package workflows

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestWorkflowID(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ a, b [2]string }{
		{[2]string{"a/b", "c"}, [2]string{"a", "b/c"}},
		{[2]string{"a", "b"}, [2]string{"a%2Fb", ""}},
		{[2]string{"a%2Fb", "c"}, [2]string{"a/b", "c"}},
		{[2]string{"acme", "r1"}, [2]string{"other", "r1"}},
		{[2]string{"acme", "r1"}, [2]string{"acme", "r2"}},
	} {
		assert.NotEqual(t, WorkflowID(tc.a[0], tc.a[1]), WorkflowID(tc.b[0], tc.b[1]), "%q vs %q", tc.a, tc.b)
	}
	assert.Equal(t, WorkflowID("acme", "r1"), WorkflowID("acme", "r1"), "the same run has the same ID")
	assert.Equal(t, 2, strings.Count(WorkflowID("a/b", "c/d"), "/"), "separators are never escaped away")
}
