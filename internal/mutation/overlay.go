package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// overlay is a mutated copy of one source file, kept in a temporary
// directory of its own with the -overlay file that makes the go command
// compile the copy in the original's place. The source file is only read.
type overlay struct {
	// Dir is the temporary directory; remove removes it.
	Dir string
	// File is the -overlay file: {"Replace": {original: copy}}.
	File string
	// Mutated is the mutated copy of the source file.
	Mutated string
}

// overlayFile is the JSON that go build -overlay reads.
type overlayFile struct {
	Replace map[string]string
}

// writeOverlay reads m's file under root, makes m's edits to its bytes and
// writes them, with the -overlay file that names them, to a new temporary
// directory. It fails with errStale when the file is gone or m no longer
// applies to it.
func writeOverlay(root string, m Mutation) (overlay, error) {
	path, err := filepath.Abs(filepath.Join(root, filepath.FromSlash(m.File)))
	if err != nil {
		return overlay{}, err
	}
	src, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return overlay{}, fmt.Errorf("%w: %s changed: it is gone", errStale, m.File)
	} else if err != nil {
		return overlay{}, err
	}
	mutated, err := m.mutate(src)
	if err != nil {
		return overlay{}, err
	}
	dir, err := os.MkdirTemp("", "mutation-"+m.Name+"-")
	if err != nil {
		return overlay{}, err
	}
	o := overlay{
		Dir:     dir,
		File:    filepath.Join(dir, "overlay.json"),
		Mutated: filepath.Join(dir, filepath.Base(path)),
	}
	spec, err := json.Marshal(overlayFile{Replace: map[string]string{path: o.Mutated}})
	if err == nil {
		err = os.WriteFile(o.Mutated, mutated, 0o600)
	}
	if err == nil {
		err = os.WriteFile(o.File, spec, 0o600)
	}
	if err != nil {
		return overlay{}, errors.Join(fmt.Errorf("write the overlay of %s: %w", m.File, err), o.remove())
	}
	return o, nil
}

// remove removes the overlay's temporary directory.
func (o overlay) remove() error {
	return os.RemoveAll(o.Dir)
}

// goFlags returns the value of GOFLAGS for the go commands that the tests
// themselves run (a test that builds a binary with go build): base, the
// GOFLAGS in force, and -overlay, so that the binary holds the mutation
// too. GOFLAGS splits on spaces; a path with spaces is quoted.
func (o overlay) goFlags(base string) (string, error) {
	flag := "-overlay=" + o.File
	if strings.ContainsAny(flag, " \t\n\r'\"") {
		switch {
		case !strings.Contains(flag, "'"):
			flag = "'" + flag + "'"
		case !strings.Contains(flag, `"`):
			flag = `"` + flag + `"`
		default:
			return "", fmt.Errorf("%s holds both kinds of quote: GOFLAGS cannot name it", o.File)
		}
	}
	return strings.TrimSpace(base + " " + flag), nil
}
