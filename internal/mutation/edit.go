package main

import (
	"bytes"
	"errors"
	"fmt"
	"strconv"
)

// errStale is returned, wrapped, when a mutation's snippet no longer occurs
// exactly once in its file.
var errStale = errors.New("no longer applies")

// replacement is one textual edit: old, which occurs exactly once, becomes
// new.
type replacement struct{ old, new string }

// importBlock is how a file's import block opens, after gofmt.
const importBlock = "import (\n"

// replacements returns the edits m makes to its file: its snippet, and the
// import it needs, if any.
func (m Mutation) replacements() []replacement {
	rs := []replacement{{m.Old, m.New}}
	if m.Import != "" {
		rs = append(rs, replacement{importBlock, importBlock + "\t" + strconv.Quote(m.Import) + "\n"})
	}
	return rs
}

// mutate returns src with m's edits made. It fails with errStale when a
// snippet does not occur in src exactly once, or when src already imports
// m.Import.
func (m Mutation) mutate(src []byte) ([]byte, error) {
	if m.Import != "" && bytes.Contains(src, []byte(strconv.Quote(m.Import))) {
		return nil, fmt.Errorf("%w: %s changed (it imports %s already)", errStale, m.File, m.Import)
	}
	out := src
	for _, r := range m.replacements() {
		if n := bytes.Count(out, []byte(r.old)); n != 1 {
			return nil, fmt.Errorf("%w: %s changed (the snippet %q occurs %d times, not once)",
				errStale, m.File, cut(r.old, 60), n)
		}
		out = bytes.Replace(out, []byte(r.old), []byte(r.new), 1)
	}
	return out, nil
}

func cut(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "..."
}
