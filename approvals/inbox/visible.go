package inbox

import (
	"bytes"
	"io"

	"golang.org/x/net/html"

	"github.com/oncerun/oncerun/internal/untrusted"
)

// visible rewrites a rendered page so that no text from a run (a goal,
// arguments, a result, a note, a name) can reorder or hide what the page
// shows: every control and format character in the page's text and
// attributes, a right-to-left override (U+202E) or a zero-width space
// among them, and every byte that is not UTF-8, is shown as its escape
// (untrusted.Escape: \u202e, \u001b, \xff), as the CLI shows it.
// html/template has escaped the page for HTML already; the escapes added
// here are plain text.
//
// Form values are left as they are: a value attribute and a textarea's
// text are sent back with their form and must carry what the run holds
// (the edit form shows a hint for such a value, and the arguments above it
// show it escaped).
func visible(page []byte) []byte {
	if untrusted.Escape(string(page)) == string(page) {
		return page
	}
	var out bytes.Buffer
	out.Grow(len(page) + 64)
	z := html.NewTokenizer(bytes.NewReader(page))
	inTextarea := false
	for {
		tt := z.Next()
		if tt == html.ErrorToken {
			if z.Err() != io.EOF {
				// Not a page html/template writes: show it all escaped.
				return []byte(untrusted.Escape(string(page)))
			}
			return out.Bytes()
		}
		raw := string(z.Raw())
		switch tt {
		case html.TextToken:
			if inTextarea {
				out.WriteString(raw)
			} else {
				out.WriteString(untrusted.Escape(raw))
			}
		case html.StartTagToken, html.SelfClosingTagToken:
			name, hasAttr := z.TagName()
			if string(name) == "textarea" && tt == html.StartTagToken {
				inTextarea = true
			}
			if !hasAttr || !holdsHidden(raw) {
				out.WriteString(raw)
				continue
			}
			writeVisibleTag(&out, raw, string(name), z, tt == html.SelfClosingTagToken)
		case html.EndTagToken:
			if name, _ := z.TagName(); string(name) == "textarea" {
				inTextarea = false
			}
			out.WriteString(raw)
		default:
			out.WriteString(raw)
		}
	}
}

// writeVisibleTag writes the start tag the tokenizer is at (raw) with its
// attributes' values escaped, but for a value attribute: as it was when
// nothing else needs escaping.
func writeVisibleTag(out *bytes.Buffer, raw, name string, z *html.Tokenizer, selfClosing bool) {
	type attr struct{ key, val string }
	var attrs []attr
	changed := false
	for more := true; more; {
		var key, val []byte
		key, val, more = z.TagAttr()
		a := attr{string(key), string(val)}
		if a.key != "value" && holdsHidden(a.val) {
			a.val, changed = untrusted.Escape(a.val), true
		}
		attrs = append(attrs, a)
	}
	if !changed {
		out.WriteString(raw)
		return
	}
	out.WriteString("<" + name)
	for _, a := range attrs {
		out.WriteString(" " + a.key + `="` + html.EscapeString(a.val) + `"`)
	}
	if selfClosing {
		out.WriteString("/")
	}
	out.WriteString(">")
}

// holdsHidden reports whether s has a character visible would escape.
func holdsHidden(s string) bool { return untrusted.Escape(s) != s }
