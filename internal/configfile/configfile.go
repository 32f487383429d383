// Package configfile reads oncerun's configuration files (the MCP servers,
// the sub-agents) one way: JSON or YAML by the file's name, decoded
// strictly, with errors that name the field by its path in the file.
package configfile

import (
	"bytes"
	"cmp"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"

	"github.com/go-json-experiment/json"
	"github.com/go-json-experiment/json/jsontext"
	"go.yaml.in/yaml/v3"

	"github.com/oncerun/oncerun/internal/untrusted"
)

// Read reads the file at path and says its format: "json" when its name
// ends in .json, "yaml" when in .yaml or .yml; any other name is refused
// (an error that does not repeat the path). A file that cannot be read is
// its *fs.PathError.
func Read(path string) (raw []byte, format string, err error) {
	switch strings.ToLower(filepath.Ext(path)) {
	case ".json":
		format = "json"
	case ".yaml", ".yml":
		format = "yaml"
	default:
		return nil, "", fmt.Errorf("unknown file type %q: name it .json, .yaml or .yml", filepath.Ext(path))
	}
	raw, err = os.ReadFile(path)
	if err != nil {
		return nil, "", err
	}
	return raw, format, nil
}

// Decode decodes raw, in format "json" or "yaml", into v, strictly: an
// unknown or repeated field is refused, with its path (servers[0].url).
// An empty document decodes as {}.
func Decode(raw []byte, format string, v any) error {
	switch format {
	case "json":
	case "yaml":
		// YAML is decoded as the JSON it stands for, so that both formats
		// are held to one strict decoder and their errors name the same
		// paths.
		var doc any
		if err := yaml.Unmarshal(raw, &doc); err != nil {
			return err // "yaml: line 3: ..."
		}
		j, err := jsonValue(doc, "")
		if err != nil {
			return err
		}
		if raw, err = json.Marshal(j); err != nil {
			return fmt.Errorf("yaml: %w", err)
		}
	default:
		return fmt.Errorf("unknown config format %q (want json or yaml)", format)
	}
	if len(bytes.TrimSpace(raw)) == 0 {
		raw = []byte("{}")
	}
	err := json.Unmarshal(raw, v, json.RejectUnknownMembers(true))
	if err == nil {
		return nil
	}
	return allErrors(raw, v, err)
}

// maxDecodeErrors bounds the problems of one file that are named.
const maxDecodeErrors = 50

// allErrors names every field of raw that does not decode into v, not only
// first, the first decoding error: each field the decoder refuses (an
// unknown one, one of the wrong type) is taken out of the document, which
// is decoded again, until it decodes or a refusal names no field (a
// syntax error, a field twice: the file cannot be read further).
func allErrors(raw []byte, v any, first error) error {
	var doc any
	if json.Unmarshal(raw, &doc) != nil {
		return decodeError(first)
	}
	errs := []error{decodeError(first)}
	err := first
	for len(errs) < maxDecodeErrors {
		var se *json.SemanticError
		if !errors.As(err, &se) || se.JSONPointer == "" || !drop(&doc, se.JSONPointer) {
			break
		}
		b, merr := json.Marshal(doc)
		if merr != nil {
			break
		}
		zero := reflect.New(reflect.TypeOf(v).Elem()).Interface()
		if err = json.Unmarshal(b, zero, json.RejectUnknownMembers(true)); err == nil {
			break
		}
		errs = append(errs, decodeError(err))
	}
	return errors.Join(errs...)
}

// drop takes the member at pointer out of doc (an array's element becomes
// null, so that the indexes of the rest stay); it reports whether there was
// one.
func drop(doc *any, pointer jsontext.Pointer) bool {
	tokens := slices.Collect(pointer.Tokens())
	if len(tokens) == 0 {
		return false
	}
	at := *doc
	for _, tok := range tokens[:len(tokens)-1] {
		switch c := at.(type) {
		case map[string]any:
			at = c[tok]
		case []any:
			i, err := strconv.Atoi(tok)
			if err != nil || i < 0 || i >= len(c) {
				return false
			}
			at = c[i]
		default:
			return false
		}
	}
	last := tokens[len(tokens)-1]
	switch c := at.(type) {
	case map[string]any:
		if _, ok := c[last]; !ok {
			return false
		}
		delete(c, last)
		return true
	case []any:
		i, err := strconv.Atoi(last)
		if err != nil || i < 0 || i >= len(c) || c[i] == nil {
			return false
		}
		c[i] = nil
		return true
	}
	return false
}

// jsonValue turns a decoded YAML document into one json.Marshal takes:
// YAML allows mapping keys that are not strings, JSON does not.
func jsonValue(v any, path string) (any, error) {
	switch v := v.(type) {
	case map[string]any:
		for k, e := range v {
			var err error
			if v[k], err = jsonValue(e, path+"/"+k); err != nil {
				return nil, err
			}
		}
		return v, nil
	case map[any]any:
		out := make(map[string]any, len(v))
		for k, e := range v {
			ks, ok := k.(string)
			if !ok {
				return nil, fmt.Errorf("%s: key %v is not a string", displayPath(path), k)
			}
			var err error
			if out[ks], err = jsonValue(e, path+"/"+ks); err != nil {
				return nil, err
			}
		}
		return out, nil
	case []any:
		for i, e := range v {
			var err error
			if v[i], err = jsonValue(e, path+"/"+strconv.Itoa(i)); err != nil {
				return nil, err
			}
		}
		return v, nil
	}
	return v, nil
}

// decodeError rewrites a decoding error to name the field by its path
// (servers[0].tools.refund.class).
func decodeError(err error) error {
	var se *json.SemanticError
	if !errors.As(err, &se) {
		return fmt.Errorf("decode: %w", err)
	}
	at := displayPath(string(se.JSONPointer))
	switch {
	case errors.Is(se.Err, json.ErrUnknownName):
		return fmt.Errorf("%s: unknown field", at)
	case se.Err != nil:
		return fmt.Errorf("%s: %w", at, se.Err)
	}
	want := "a value of another type"
	if se.GoType != nil {
		want = se.GoType.String()
	}
	return fmt.Errorf("%s: got %s, want %s", at, cmp.Or(se.JSONKind.String(), "a value"), want)
}

// displayPath spells a JSON pointer the way a reader of the file thinks of
// it: /servers/0/tools/refund becomes servers[0].tools.refund.
func displayPath(pointer string) string {
	if pointer == "" {
		return "(top level)"
	}
	return untrusted.JSONPath(jsontext.Pointer(pointer))
}
