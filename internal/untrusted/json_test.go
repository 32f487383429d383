package untrusted

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestJSONAcceptsOrdinaryDocuments(t *testing.T) {
	t.Parallel()
	for _, doc := range []string{`{}`, `{"order_id":"1001","text":"line\nnext\ttab"}`, `[1,2.5,null,true,"é"]`, `"x"`} {
		assert.NoError(t, JSON("args", []byte(doc)), doc)
	}
}

func TestJSONRefusals(t *testing.T) {
	t.Parallel()
	deep := strings.Repeat("[", MaxJSONDepth+1) + strings.Repeat("]", MaxJSONDepth+1)
	for _, tc := range []struct{ name, doc, want string }{
		{"NUL in a value", `{"text":"a\u0000b"}`, "args holds a NUL character (U+0000) at text (byte 1 of the string)"},
		{"NUL in a name", `{"a\u0000":1}`, "NUL"},
		{"escape in an array", `{"notes":["ok","\u001b[2J"]}`, "U+001B at notes[1]"},
		{"C1 control", `{"t":"\u0085"}`, "U+0085"},
		{"lone surrogate", `{"t":"\ud800"}`, "not valid JSON"},
		{"not UTF-8", "{\"t\":\"\xff\"}", "not valid JSON"},
		{"too deep", deep, "nests 33 deep"},
		{"not JSON", `{"t":`, "not valid JSON"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			err := JSON("args", []byte(tc.doc))
			require.Error(t, err)
			assert.ErrorIs(t, err, ErrInvalid)
			assert.Contains(t, err.Error(), tc.want)
		})
	}
}

type decodeTarget struct {
	RunID  string          `json:"run_id,omitempty"`
	Steps  int             `json:"steps,omitempty"`
	Args   json.RawMessage `json:"args,omitempty"`
	Nested *struct {
		Name string `json:"name"`
	} `json:"nested,omitempty"`
	List []struct {
		Tool string `json:"tool"`
	} `json:"list,omitempty"`
}

func TestDecodeAcceptsExactDocuments(t *testing.T) {
	t.Parallel()
	var v decodeTarget
	require.NoError(t, Decode([]byte(`{"run_id":"r1","steps":3,"args":{"b":1,"a":[2]},"nested":{"name":"n"},"list":[{"tool":"t"}]}`), &v))
	assert.Equal(t, "r1", v.RunID)
	assert.Equal(t, 3, v.Steps)
	assert.JSONEq(t, `{"b":1,"a":[2]}`, string(v.Args))
	assert.Equal(t, "n", v.Nested.Name)
	assert.Equal(t, "t", v.List[0].Tool)
}

func TestDecodeRefusals(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ name, doc, want string }{
		{"duplicate key", `{"run_id":"a","run_id":"b"}`, `field "run_id" appears twice`},
		{"duplicate nested key", `{"list":[{"tool":"a","tool":"b"}]}`, `field "tool" appears twice in list[0]`},
		{"other case", `{"Run_ID":"a"}`, `unknown field "Run_ID"`},
		{"unknown field", `{"tenant":"globex"}`, `unknown field "tenant"`},
		{"unknown nested field", `{"nested":{"name":"n","x":1}}`, `unknown field "x" in nested`},
		{"wrong type", `{"steps":"3"}`, "steps is a string; want a whole number"},
		{"fraction for an int", `{"steps":1.5}`, "steps is a number that does not fit"},
		{"overflow", `{"steps":1e30}`, "steps is a number that does not fit"},
		{"trailing data", `{} {}`, "there is data after the JSON value, at byte 3"},
		{"cut short", `{"run_id":`, "ends too early"},
		{"not UTF-8", "{\"run_id\":\"\xff\"}", "not valid JSON"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var v decodeTarget
			err := Decode([]byte(tc.doc), &v)
			require.Error(t, err)
			assert.ErrorIs(t, err, ErrInvalid)
			assert.Contains(t, err.Error(), tc.want)
		})
	}
}
