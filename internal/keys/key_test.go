package keys

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestKeyString(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		key  Key
		want string
	}{
		{"plain", Key{"acme", "r1", 3, "issue_credit"}, "v1/acme/r1/3/issue_credit"},
		{"slash in run id", Key{"acme", "a/b", 1, "t"}, "v1/acme/a%2Fb/1/t"},
		{"percent in run id", Key{"acme", "a%2Fb", 1, "t"}, "v1/acme/a%252Fb/1/t"},
		{"space and unicode", Key{"acme", "run é 1", 1, "t"}, "v1/acme/run%20%C3%A9%201/1/t"},
		{"large step", Key{"acme", "r", 1 << 62, "t"}, "v1/acme/r/4611686018427387904/t"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			k, err := New(tt.key.Tenant, tt.key.RunID, tt.key.Step, tt.key.Tool)
			require.NoError(t, err)
			assert.Equal(t, tt.want, k.String())
			back, err := Parse(k.String())
			require.NoError(t, err)
			assert.Equal(t, k, back)
		})
	}
}

func TestKeyNoCollisionOnSeparators(t *testing.T) {
	t.Parallel()
	// Without escaping, both tuples would print as v1/acme/a/b/1/t-ish strings.
	a, err := New("acme", "a/1/t", 1, "t")
	require.NoError(t, err)
	b, err := New("acme/a", "1", 1, "t")
	require.NoError(t, err)
	assert.NotEqual(t, a.String(), b.String())
}

func TestNewRejects(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name                string
		tenant, runID, tool string
		step                int64
		wantMsg             string
	}{
		{"empty tenant", "", "r", "t", 1, "tenant is empty"},
		{"empty run id", "acme", "", "t", 1, "run id is empty"},
		{"empty tool", "acme", "r", "", 1, "tool is empty"},
		{"zero step", "acme", "r", "t", 0, "step is 0"},
		{"negative step", "acme", "r", "t", -4, "step is -4"},
		{"long tenant", strings.Repeat("a", MaxTenantLen+1), "r", "t", 1, "tenant is 65 bytes, the limit is 64"},
		{"long run id", "acme", strings.Repeat("r", MaxRunIDLen+1), "t", 1, "run id is 257 bytes"},
		{"long tool", "acme", "r", strings.Repeat("t", MaxToolLen+1), 1, "tool is 65 bytes"},
		{"invalid utf8", "acme", "r\xff", "t", 1, "run id is not valid UTF-8"},
		{"control char", "acme", "r\x00", "t", 1, "holds a control character"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, err := New(tt.tenant, tt.runID, tt.step, tt.tool)
			require.ErrorIs(t, err, ErrInvalidKey)
			assert.Contains(t, err.Error(), tt.wantMsg)
		})
	}
}

func TestParseRejects(t *testing.T) {
	t.Parallel()
	for _, s := range []string{
		"",
		"v1/acme/r/1",       // too few fields
		"v1/acme/r/1/t/x",   // too many fields
		"v2/acme/r/1/t",     // unknown version
		"v1/acme/a%2fb/1/t", // lower-case escape: not canonical
		"v1/%61cme/r/1/t",   // needless escape of 'a'
		"v1/acme/r/01/t",    // step not canonical
		"v1/acme/r/+1/t",    // step not canonical
		"v1/acme/r/0/t",     // step out of range
		"v1/acme/r/x/t",     // step not a number
		"v1/acme/%zz/1/t",   // broken escape
		"v1//r/1/t",         // empty tenant
		"v1/acme/r%00/1/t",  // escaped control character
	} {
		_, err := Parse(s)
		assert.ErrorIs(t, err, ErrInvalidKey, "Parse(%q)", s)
	}
}

func TestParseWorkflowIDReadsWhatWorkflowIDWrote(t *testing.T) {
	for _, c := range [][2]string{{"acme", "r1"}, {"ac/me", "run 1/2%"}, {"acme", "r1.3"}} {
		tenant, run, ok := ParseWorkflowID(WorkflowID(c[0], c[1]))
		assert.True(t, ok, c)
		assert.Equal(t, c[0], tenant)
		assert.Equal(t, c[1], run)
	}
	for _, id := range []string{"", "oncerun/", "oncerun/acme", "oncerun//r1", "oncerun/acme/", "other/acme/r1", "oncerun/a%zz/r1"} {
		_, _, ok := ParseWorkflowID(id)
		assert.False(t, ok, id)
	}
}
