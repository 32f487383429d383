package untrusted

import (
	"errors"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestTextAcceptsWhatPeopleWrite(t *testing.T) {
	t.Parallel()
	for _, s := range []string{"", "refund order 1001", "line one\nline two\r\n\tindented", "Café 東京 🚀", "שלום \u200f", strings.Repeat("x", 100)} {
		assert.NoError(t, Text("goal", s, 100), "%q", s)
	}
}

func TestTextRefusals(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, s, want string
	}{
		{"NUL", "refund\x00x", "goal holds a NUL character (U+0000) at byte 6"},
		{"escape", "a\x1b[2J", "goal holds the control character U+001B at byte 1"},
		{"DEL", "a\x7f", "U+007F"},
		{"C1 control", "a\u009bb", "U+009B"},
		{"not UTF-8", "ab\xffc", "goal is not valid UTF-8 (at byte 2)"},
		{"cut inside a character", "ab\xe2\x82", "not valid UTF-8 (at byte 2)"},
		{"too long", strings.Repeat("é", 51), "goal is 102 bytes; the limit is 100"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			err := Text("goal", tc.s, 100)
			require.Error(t, err)
			assert.ErrorIs(t, err, ErrInvalid)
			assert.Contains(t, err.Error(), tc.want)
		})
	}
}

func TestNameAcceptsPlainIdentifiers(t *testing.T) {
	t.Parallel()
	for _, s := range []string{"r1", "refund 1001", "acme/eu", "run-7_retry", "café", "東京-1", "a.b", "...", "%2F", "dana@acme",
		"Ольга", "注文-order-1001", "ひらがなカタカナ漢字abc", "한국어-abc", "Ελένη"} {
		assert.NoError(t, Name("run_id", s, 64), "%q", s)
	}
}

func TestNameRefusals(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, s, want string
	}{
		{"empty", "", "run_id is empty"},
		{"dot", ".", "cannot be used"},
		{"dot dot", "..", "cannot be used"},
		{"slash alone", "/", "cannot be used: a URL path cannot carry it alone"},
		{"too long", strings.Repeat("r", 65), "65 bytes; the limit is 64"},
		{"NUL", "r\x00", "NUL"},
		{"tab", "r\t1", "control character U+0009"},
		{"right-to-left override", "r\u202e1", "invisible or format character U+202E"},
		{"zero-width space", "r\u200b1", "U+200B"},
		{"byte order mark", "\ufeffr1", "U+FEFF"},
		{"no-break space", "r\u00a01", "space U+00A0, which is not the ASCII space"},
		{"line separator", "r\u20281", "U+2028"},
		{"private use", "r\ue0001", "private-use character U+E000"},
		{"unassigned", "r\U000effff", "unassigned"},
		{"noncharacter", "r\uffff", "unassigned"},
		{"fullwidth letters", "ｒ１", `NFKC form is "r1"`},
		{"decomposed accent", "cafe\u0301", "NFKC form"},
		{"leading space", " r1", "starts or ends with a space"},
		{"Cyrillic a among Latin letters", "\u0430cme-42", "mixes the scripts Cyrillic and Latin"},
		{"Greek omicron among Latin letters", "d\u03bfg", "mixes the scripts Greek and Latin"},
		{"Cyrillic and Greek", "\u0430\u03b2", "mixes the scripts Cyrillic and Greek"},
		{"trailing space", "r1 ", "starts or ends with a space"},
		{"not UTF-8", "r\xff", "not valid UTF-8"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			err := Name("run_id", tc.s, 64)
			require.Error(t, err)
			assert.True(t, errors.Is(err, ErrInvalid))
			assert.Contains(t, err.Error(), tc.want)
		})
	}
}

func TestCutKeepsCharactersWhole(t *testing.T) {
	t.Parallel()
	assert.Equal(t, "abc", Cut("abc", 5))
	assert.Equal(t, "ab", Cut("abé", 3), "é is two bytes: cut before it")
	assert.Equal(t, "abé", Cut("abé", 4))
	assert.Equal(t, "", Cut("東", 2))
	assert.Equal(t, "", Cut("abc", -1))
}

func TestCleanMakesAnythingStorable(t *testing.T) {
	t.Parallel()
	ua := strings.Repeat("a", 511) + "é" // cut at 512 would split é
	got := Clean(ua, 512)
	assert.Equal(t, strings.Repeat("a", 511), got)
	assert.Equal(t, `curl\u0000\xff\u001b`, Clean("curl\x00\xff\x1b", 512))
	assert.NoError(t, Text("clean", Clean("a\x00\xc3", 100), 100))
}
