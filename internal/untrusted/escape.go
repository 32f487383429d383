package untrusted

import (
	"fmt"
	"io"
	"strings"
	"unicode"
	"unicode/utf16"
	"unicode/utf8"
)

// Escape returns s with every character a terminal might obey or hide
// replaced by an escape: control characters other than tab and newline,
// line and paragraph separators and format characters (bidirectional
// overrides, zero-width spaces) become \u escapes such as \u202e (a
// surrogate pair above U+FFFF, so that the result is still valid inside a
// JSON string), and bytes that are not UTF-8 become \x escapes such as
// \xff. Everything else is left as it is.
func Escape(s string) string {
	i := firstUnsafe(s)
	if i < 0 {
		return s
	}
	var b strings.Builder
	b.Grow(len(s) + 16)
	b.WriteString(s[:i])
	writeEscaped(&b, s[i:])
	return b.String()
}

// firstUnsafe returns the offset of the first byte of s that Escape
// changes, or -1.
func firstUnsafe(s string) int {
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			if unsafeRune(rune(c)) {
				return i
			}
			i++
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if (r == utf8.RuneError && size == 1) || unsafeRune(r) {
			return i
		}
		i += size
	}
	return -1
}

func writeEscaped(b *strings.Builder, s string) {
	for i := 0; i < len(s); {
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && size == 1:
			fmt.Fprintf(b, `\x%02x`, s[i])
		case unsafeRune(r):
			if r > 0xffff {
				hi, lo := utf16.EncodeRune(r)
				fmt.Fprintf(b, `\u%04x\u%04x`, hi, lo)
			} else {
				fmt.Fprintf(b, `\u%04x`, r)
			}
		default:
			b.WriteString(s[i : i+size])
		}
		i += size
	}
}

// unsafeRune reports the characters Escape replaces.
func unsafeRune(r rune) bool {
	switch {
	case r == '\t' || r == '\n':
		return false
	case r < 0x20 || r == 0x7f:
		return true
	case r < 0x80:
		return false
	case r <= 0x9f, r == 0x2028, r == 0x2029:
		return true
	}
	return unicode.Is(unicode.Cf, r)
}

// TerminalWriter escapes, as [Escape] does, everything written through it to
// a terminal, so that no text from a run (a goal, a tool's result, an error)
// can move the cursor, change colours or reorder what is shown. Text that
// is already safe, such as JSON from encoding/json, passes unchanged. A
// character split across two writes is escaped whole; call Flush at the end
// so that an incomplete one is written.
type TerminalWriter struct {
	w       io.Writer
	pending []byte // the start of a character the next write completes
}

// NewTerminalWriter returns a TerminalWriter that writes to w.
func NewTerminalWriter(w io.Writer) *TerminalWriter { return &TerminalWriter{w: w} }

// Write escapes p and writes it; it reports len(p) on success.
func (t *TerminalWriter) Write(p []byte) (int, error) {
	data := p
	if len(t.pending) > 0 {
		data = append(t.pending, p...)
		t.pending = nil
	}
	// Keep back an incomplete character at the end for the next write.
	keep := 0
	for k := 1; k <= utf8.UTFMax-1 && k <= len(data); k++ {
		if utf8.RuneStart(data[len(data)-k]) {
			if !utf8.FullRune(data[len(data)-k:]) {
				keep = k
			}
			break
		}
	}
	if keep > 0 {
		t.pending = append([]byte(nil), data[len(data)-keep:]...)
		data = data[:len(data)-keep]
	}
	if _, err := io.WriteString(t.w, Escape(string(data))); err != nil {
		return 0, err
	}
	return len(p), nil
}

// Flush writes an incomplete character held back from the last write, as
// escaped bytes.
func (t *TerminalWriter) Flush() error {
	if len(t.pending) == 0 {
		return nil
	}
	rest := t.pending
	t.pending = nil
	_, err := io.WriteString(t.w, Escape(string(rest)))
	return err
}
