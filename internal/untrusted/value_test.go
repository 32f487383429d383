package untrusted

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestValueAcceptsWhatCanBeReadBack(t *testing.T) {
	t.Parallel()
	for _, doc := range []string{
		`{"id":9007199254740993}`, // beyond 2⁵³, kept exactly
		`{"id":-18446744073709551615}`,
		`[1.7976931348623157e308, 5e-324, 0, -0.0, 0e-400, 1.5]`,
		`"a\ttab"`, `null`,
		`{"customer":"Mallory\u001b]2;pwned\u0007"}`, // data, escaped where shown
	} {
		assert.NoError(t, Value("result", []byte(doc), 1<<10), doc)
	}
}

func TestValueRefusals(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("1", MaxNumberBytes+1)
	for _, tc := range []struct{ name, doc, want string }{
		{"overflow", `{"x":1e400}`, "result holds the number 1e400 at x, beyond the range of a double (about ±1.8e308): send it as a string"},
		{"negative overflow", `[-2e308]`, "the number -2e308 at [0], beyond the range"},
		{"underflow", `{"x":{"y":1e-400}}`, "result holds the number 1e-400 at x.y, too small for a double (it would read as 0): send it as a string"},
		{"long", `{"x":` + long + `}`, "a number of 101 characters at x; the limit is 100: send it as a string"},
		{"NUL", `{"note":"a\u0000b"}`, "result holds a NUL character (U+0000) at note"},
		{"too big", `"` + strings.Repeat("a", 1<<10) + `"`, "result is 1026 bytes; the limit is 1024"},
		{"not JSON", `{"x":`, "not valid JSON"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			err := Value("result", []byte(tc.doc), 1<<10)
			require.ErrorIs(t, err, ErrInvalid)
			assert.Contains(t, err.Error(), tc.want)
		})
	}
}

func TestJSONLeavesNumbersToValue(t *testing.T) {
	t.Parallel()
	// Workflow code replays with JSON: it must keep accepting what it
	// accepted.
	assert.NoError(t, JSON("result", []byte(`{"x":1e400,"y":1e-400}`)))
}

func TestEqualComparesValuesExactly(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		a, b string
		want bool
	}{
		{`{"id":9007199254740993}`, `{ "id" : 9007199254740993 }`, true},
		{`{"id":9007199254740993}`, `{"id":9007199254740992}`, false},
		{`{"a":1,"b":[1,2]}`, `{"b":[1,2],"a":1.0}`, true},
		{`[1,2]`, `[2,1]`, false},
		{`1e2`, `100`, true},
		{`0.1`, `0.10000000000000001`, false},
		{`"true"`, `true`, false},
		{`null`, `null`, true},
		{`{"a":null}`, `{}`, false},
		{`"é"`, `"\u00e9"`, true},
		{``, ``, true},
		{``, `null`, false},
	} {
		got, err := Equal([]byte(tc.a), []byte(tc.b))
		require.NoError(t, err, "%s = %s", tc.a, tc.b)
		assert.Equal(t, tc.want, got, "%s = %s", tc.a, tc.b)
		got, err = Equal([]byte(tc.b), []byte(tc.a))
		require.NoError(t, err)
		assert.Equal(t, tc.want, got, "%s = %s", tc.b, tc.a)
	}
}

func TestEqualRefusesWhatValueRefuses(t *testing.T) {
	t.Parallel()
	_, err := Equal([]byte(`1e400`), []byte(`1e400`))
	assert.ErrorIs(t, err, ErrInvalid)
	_, err = Equal([]byte(`{"a":`), []byte(`{}`))
	assert.ErrorIs(t, err, ErrInvalid)
}
