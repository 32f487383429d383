package untrusted

import (
	"bytes"
	"encoding/json"
	"testing"
	"unicode/utf8"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestEscape(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ in, want string }{
		{"plain text, 東京 🚀", "plain text, 東京 🚀"},
		{"tab\tand\nnewline", "tab\tand\nnewline"},
		{"\x1b[31mred\x1b[0m", `\u001b[31mred\u001b[0m`},
		{"carriage\rreturn", `carriage\u000dreturn`},
		{"csi\u009b2J", `csi\u009b2J`},
		{"evil\u202etxt.exe", `evil\u202etxt.exe`},
		{"zero\u200bwidth", `zero\u200bwidth`},
		{"tag\U000E0041", `tag\udb40\udc41`},
		{"bad\xffbyte", `bad\xffbyte`},
		{"del\x7f", `del\u007f`},
	} {
		assert.Equal(t, tc.want, Escape(tc.in), "%q", tc.in)
	}
}

// TestEscapeKeepsJSONValid checks that escaping JSON that encoding/json
// wrote leaves it valid JSON with the same meaning.
func TestEscapeKeepsJSONValid(t *testing.T) {
	t.Parallel()
	v := map[string]string{"goal": "refund\u202e\u0085\U000E0041 \x1b", "x": "東京"}
	raw, err := json.Marshal(v)
	require.NoError(t, err)
	var back map[string]string
	require.NoError(t, json.Unmarshal([]byte(Escape(string(raw))), &back))
	assert.Equal(t, v, back)
}

func TestTerminalWriterEscapesAcrossWrites(t *testing.T) {
	t.Parallel()
	text := "a\u202eb\x1bc東京\xffd"
	want := Escape(text)
	for split := range len(text) + 1 {
		var out bytes.Buffer
		w := NewTerminalWriter(&out)
		n, err := w.Write([]byte(text[:split]))
		require.NoError(t, err)
		assert.Equal(t, split, n)
		_, err = w.Write([]byte(text[split:]))
		require.NoError(t, err)
		require.NoError(t, w.Flush())
		assert.Equal(t, want, out.String(), "split at %d", split)
	}
}

func TestTerminalWriterFlushesAnIncompleteCharacter(t *testing.T) {
	t.Parallel()
	var out bytes.Buffer
	w := NewTerminalWriter(&out)
	_, err := w.Write([]byte("ok\xe6\x9d"))
	require.NoError(t, err)
	assert.Equal(t, "ok", out.String(), "the start of 東 waits for the next write")
	require.NoError(t, w.Flush())
	assert.Equal(t, `ok\xe6\x9d`, out.String())
}

// FuzzEscape checks that escaped text is valid UTF-8 with nothing left to
// escape, and that writing it in two pieces through a TerminalWriter gives
// the same text.
func FuzzEscape(f *testing.F) {
	f.Add("\x1b[2J\u202e", 3)
	f.Add("東京\xff", 1)
	f.Fuzz(func(t *testing.T, s string, split int) {
		got := Escape(s)
		if !utf8.ValidString(got) {
			t.Fatalf("Escape(%q) = %q is not UTF-8", s, got)
		}
		if i := firstUnsafe(got); i >= 0 {
			t.Fatalf("Escape(%q) = %q still holds an unsafe character at %d", s, got, i)
		}
		if Escape(got) != got {
			t.Fatalf("Escape is not idempotent on %q", got)
		}
		split = min(max(split, 0), len(s))
		var out bytes.Buffer
		w := NewTerminalWriter(&out)
		_, _ = w.Write([]byte(s[:split]))
		_, _ = w.Write([]byte(s[split:]))
		_ = w.Flush()
		if out.String() != got {
			t.Fatalf("two writes of %q split at %d gave %q, want %q", s, split, out.String(), got)
		}
	})
}
