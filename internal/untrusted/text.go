package untrusted

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"unicode"
	"unicode/utf8"

	"golang.org/x/text/unicode/norm"
)

// ErrInvalid matches every refusal of this package (errors.Is); the
// refusal's message says what is wrong, without this error's text.
var ErrInvalid = errors.New("invalid input")

// invalidError is a refusal: its message is all it says.
type invalidError struct{ msg string }

func (e *invalidError) Error() string        { return e.msg }
func (e *invalidError) Is(target error) bool { return target == ErrInvalid }

func invalid(format string, args ...any) error {
	return &invalidError{msg: fmt.Sprintf(format, args...)}
}

// Text checks free text people write and read, such as a goal or a comment:
// at most maxBytes bytes of valid UTF-8 with no control character but tab,
// newline and carriage return. field names the value in the error.
func Text(field, s string, maxBytes int) error {
	if len(s) > maxBytes {
		return invalid("%s is %d bytes; the limit is %d", field, len(s), maxBytes)
	}
	if i := invalidUTF8(s); i >= 0 {
		return invalid("%s is not valid UTF-8 (at byte %d)", field, i)
	}
	for i, r := range s {
		if textControl(r) {
			return invalid("%s holds %s at byte %d", field, describe(r), i)
		}
	}
	return nil
}

// Name checks an identifier people read and type, such as a run id: 1 to
// maxBytes bytes of valid UTF-8, in Unicode normal form NFKC, with no
// control, format, private-use or unassigned character, no space but the
// ASCII space and none at either end, letters of one writing system, and
// not ".", ".." or "/" (no URL path segment can carry them alone).
func Name(field, s string, maxBytes int) error {
	switch {
	case s == "":
		return invalid("%s is empty", field)
	case len(s) > maxBytes:
		return invalid("%s is %d bytes; the limit is %d", field, len(s), maxBytes)
	case s == "." || s == "..":
		return invalid("%s %q cannot be used: a URL path cannot carry it", field, s)
	case s == "/":
		// Escaped as %2F, a path segment that is only a slash reads as a
		// trailing slash to Go's router: no URL could reach it.
		return invalid("%s %q cannot be used: a URL path cannot carry it alone", field, s)
	}
	if i := invalidUTF8(s); i >= 0 {
		return invalid("%s is not valid UTF-8 (at byte %d)", field, i)
	}
	for i, r := range s {
		if what := nameForbidden(r); what != "" {
			return invalid("%s %q holds %s at byte %d", field, s, what, i)
		}
	}
	if first, _ := utf8.DecodeRuneInString(s); first == ' ' || strings.HasSuffix(s, " ") {
		return invalid("%s %q starts or ends with a space", field, s)
	}
	if n := norm.NFKC.String(s); n != s {
		return invalid("%s %q holds characters that look like others (its NFKC form is %q); use the plain form",
			field, s, n)
	}
	if scripts := scriptsOf(s); !oneWritingSystem(scripts) {
		return invalid("%s %q mixes the scripts %s, as a lookalike of another name would (Cyrillic а for Latin a); write it in one",
			field, s, strings.Join(scripts, " and "))
	}
	return nil
}

// scriptsOf lists, sorted, the scripts of the letters and marks of s:
// characters common to scripts (digits, punctuation) and inherited ones
// (combining marks) belong to none.
func scriptsOf(s string) []string {
	var found []string
	for _, r := range s {
		if name := scriptOf(r); name != "" && !slices.Contains(found, name) {
			found = append(found, name)
		}
	}
	slices.Sort(found)
	return found
}

func scriptOf(r rune) string {
	if r < utf8.RuneSelf {
		if (r >= 'a' && r <= 'z') || (r >= 'A' && r <= 'Z') {
			return "Latin"
		}
		return ""
	}
	for name, table := range unicode.Scripts {
		if name != "Common" && name != "Inherited" && unicode.Is(table, r) {
			return name
		}
	}
	return ""
}

// oneWritingSystem reports whether scripts (sorted) are those of one
// writing system: a single script, or Latin with the scripts written
// beside it in Chinese, Japanese and Korean text (Unicode's "highly
// restrictive" level, UTS #39).
func oneWritingSystem(scripts []string) bool {
	if len(scripts) <= 1 {
		return true
	}
	for _, allowed := range [][]string{
		{"Han", "Hiragana", "Katakana", "Latin"},
		{"Bopomofo", "Han", "Latin"},
		{"Han", "Hangul", "Latin"},
	} {
		if subset(scripts, allowed) {
			return true
		}
	}
	return false
}

func subset(a, of []string) bool {
	for _, s := range a {
		if !slices.Contains(of, s) {
			return false
		}
	}
	return true
}

// textControl reports the characters free text may not hold: the C0
// controls but tab, newline and carriage return, DEL and the C1 controls.
func textControl(r rune) bool {
	switch r {
	case '\t', '\n', '\r':
		return false
	}
	return unicode.Is(unicode.Cc, r)
}

// nameForbidden says what is wrong with r in a name, or "" if nothing is.
func nameForbidden(r rune) string {
	switch {
	case unicode.Is(unicode.Cc, r):
		return describe(r)
	case unicode.Is(unicode.Cf, r):
		return fmt.Sprintf("the invisible or format character %U", r)
	case unicode.Is(unicode.Zl, r), unicode.Is(unicode.Zp, r):
		return fmt.Sprintf("the line or paragraph separator %U", r)
	case unicode.Is(unicode.Zs, r) && r != ' ':
		return fmt.Sprintf("the space %U, which is not the ASCII space", r)
	case unicode.Is(unicode.Co, r):
		return fmt.Sprintf("the private-use character %U", r)
	case !unicode.In(r, unicode.L, unicode.M, unicode.N, unicode.P, unicode.S, unicode.Zs):
		return fmt.Sprintf("the unassigned character %U", r)
	}
	return ""
}

func describe(r rune) string {
	if r == 0 {
		return "a NUL character (U+0000)"
	}
	return fmt.Sprintf("the control character %U", r)
}

// invalidUTF8 returns the offset of the first byte of s that is not part of
// valid UTF-8, or -1.
func invalidUTF8(s string) int {
	if utf8.ValidString(s) {
		return -1
	}
	for i, r := range s {
		if r == utf8.RuneError {
			if _, size := utf8.DecodeRuneInString(s[i:]); size == 1 {
				return i
			}
		}
	}
	return -1
}

// Cut shortens s to at most maxBytes bytes, on a character boundary.
func Cut(s string, maxBytes int) string {
	if len(s) <= maxBytes {
		return s
	}
	cut := max(maxBytes, 0)
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut]
}

// Clean makes s safe to store as text and to show: it is escaped as
// [Escape] does and cut to maxBytes bytes on a character boundary. Use it
// for what must be recorded whatever it holds, such as a User-Agent.
func Clean(s string, maxBytes int) string {
	return Cut(Escape(s), maxBytes)
}
