package keys

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestCanonicalize(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, in, want string
	}{
		{"sorted members", `{"b":1,"a":2}`, `{"a":2,"b":1}`},
		{"whitespace", " {\n\t\"a\" : [ 1 , 2 ] } ", `{"a":[1,2]}`},
		{"number spelling", `[1.0,1e0,10e-1,-0,0.5e1,1E2]`, `[1,1,1,0,5,100]`},
		{"large and small doubles", `[1e21,1e-7,1.5e20]`, `[1e+21,1e-7,150000000000000000000]`},
		{"escaped unicode", `"\u00e9\u0041"`, `"éA"`},
		{"escapes kept minimal", `"\/\b\u001f\""`, `"/\b\u001f\""`},
		{"surrogate pair", `"\ud83d\ude00"`, `"😀"`},
		{"sort by UTF-16 code units", `{"\ud83d\ude00":1,"\ufb01":2}`, `{"😀":1,"ﬁ":2}`},
		{"nested", `{"z":{"y":null,"x":true},"a":[{"c":1,"b":2}]}`, `{"a":[{"b":2,"c":1}],"z":{"x":true,"y":null}}`},
		{"largest safe integer", `-9007199254740991`, `-9007199254740991`},
		{"exact large integer", `100000000000000000000`, `100000000000000000000`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, err := Canonicalize([]byte(tt.in))
			require.NoError(t, err)
			assert.Equal(t, tt.want, string(got))
		})
	}
}

func TestArgsHashEqualForEqualMeaning(t *testing.T) {
	t.Parallel()
	base := `{"order_id":"o-1","amount_cents":1500,"reason":"late delivery","currency":"EUR"}`
	same := []string{
		`{"currency":"EUR","reason":"late delivery","amount_cents":1500,"order_id":"o-1"}`,
		"{ \"order_id\" : \"o-1\",\n \"amount_cents\" : 1500.0, \"reason\":\"late delivery\", \"currency\":\"EUR\" }",
		`{"order_id":"\u006f-1","amount_cents":15e2,"reason":"late\u0020delivery","currency":"EUR"}`,
	}
	want, err := ArgsHash([]byte(base))
	require.NoError(t, err)
	assert.Regexp(t, `^[0-9a-f]{64}$`, want)
	for _, s := range same {
		got, err := ArgsHash([]byte(s))
		require.NoError(t, err)
		assert.Equal(t, want, got, "hash of %s", s)
	}
}

func TestArgsHashDiffersForDifferentMeaning(t *testing.T) {
	t.Parallel()
	docs := []string{
		`{"amount_cents":1500}`,
		`{"amount_cents":1501}`,
		`{"amount_cents":"1500"}`,
		`{"amount_cents":1500,"x":null}`,
		`{"Amount_cents":1500}`,
		`[1500]`,
		`{"amount_cents":15.001}`,
		`{"a":"é"}`,
		"{\"a\":\"e\u0301\"}", // decomposed: e + combining acute, a different string
		`9007199254740991`,
		`9007199254740990`,
	}
	seen := map[string]string{}
	for _, d := range docs {
		h, err := ArgsHash([]byte(d))
		require.NoError(t, err)
		prev, dup := seen[h]
		require.False(t, dup, "%s and %s hash equal", prev, d)
		seen[h] = d
	}
}

func TestArgsRejects(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, in, wantMsg string
	}{
		{"duplicate member", `{"a":1,"a":2}`, "duplicate object member"},
		{"nested duplicate", `{"x":{"a":1,"b":2,"a":1}}`, "duplicate object member"},
		{"invalid utf8", "{\"a\":\"\xff\"}", "invalid UTF-8"},
		{"lone surrogate", `{"a":"\ud800"}`, "surrogate"},
		{"NaN", `{"a":NaN}`, "invalid character"},
		{"Infinity", `{"a":Infinity}`, "invalid character"},
		{"overflow", `{"a":1e400}`, "outside the range of a double"},
		{"negative overflow", `{"a":-1e309}`, "outside the range of a double"},
		{"inexact integer", `{"a":9007199254740993}`, "has no exact double"},
		{"double whose canonical form is another integer", `{"a":100000000000000100.0}`, "canonical form is an integer other than its value"},
		{"exact integer whose canonical form has other digits", `{"a":100000000000000096}`, "canonical form is an integer other than its value"},
		{"large double written with an exponent", `[1.2345678901234568e20]`, "canonical form is an integer other than its value"},
		{"inexact negative integer", `{"a":-123456789012345678901}`, "has no exact double"},
		{"empty", ``, "unexpected EOF"},
		{"trailing data", `{} {}`, "after top-level value"},
		{"truncated", `{"a":`, "unexpected EOF"},
		{"too large", `"` + strings.Repeat("x", MaxArgsSize) + `"`, "the limit is 1048576"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, err := ArgsHash([]byte(tt.in))
			require.ErrorIs(t, err, ErrInvalidArgs)
			assert.Contains(t, err.Error(), tt.wantMsg)
		})
	}
}
