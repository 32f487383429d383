package untrusted

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"reflect"
	"strings"

	jsonv2 "github.com/go-json-experiment/json"
	"github.com/go-json-experiment/json/jsontext"
)

// MaxJSONDepth is how deeply the arrays and objects of a checked JSON
// document may nest.
const MaxJSONDepth = 32

// JSON checks a JSON document: it must be valid JSON, nest at most
// MaxJSONDepth deep, and every string in it, member names included, must
// pass [Text] (no NUL, no control character but tab, newline and carriage
// return). field names the document in the error, which also says where in
// it the problem is. The document's size is the caller's to bound.
//
// Workflow code checks signals and inputs with JSON on every replay, so
// its rules never change: a new rule for what enters belongs in [Value].
func JSON(field string, raw []byte) error {
	return walk(field, raw, rules{text: true})
}

// rules are what walk checks beyond valid JSON, its nesting and the NUL,
// which no string may hold (PostgreSQL's jsonb cannot).
type rules struct {
	// text refuses every control character but tab, newline and carriage
	// return in a string, as [Text] does.
	text bool
	// numbers checks each number as [Value] does.
	numbers bool
}

// walk checks raw by r.
func walk(field string, raw []byte, r rules) error {
	dec := jsontext.NewDecoder(strings.NewReader(string(raw)))
	for {
		tok, err := dec.ReadToken()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return invalid("%s is not valid JSON: %s", field, strings.TrimPrefix(err.Error(), "jsontext: "))
		}
		switch tok.Kind() {
		case '{', '[':
			if depth := dec.StackDepth(); depth > MaxJSONDepth {
				return invalid("%s nests %d deep at %s; the limit is %d", field, depth, where(dec.StackPointer()), MaxJSONDepth)
			}
		case '"':
			s := tok.String()
			for i, c := range s {
				if c == 0 || (r.text && textControl(c)) {
					return invalid("%s holds %s at %s (byte %d of the string)",
						field, describe(c), where(dec.StackPointer()), i)
				}
			}
		case '0':
			if r.numbers {
				if err := number(field, tok.String(), dec.StackPointer()); err != nil {
					return err
				}
			}
		}
	}
}

// where names a place in a JSON document for people: the document itself,
// or a path such as plan[0].args.
func where(p jsontext.Pointer) string {
	if p == "" {
		return "the top level"
	}
	return JSONPath(p)
}

// JSONPath spells a JSON pointer as a path for people: /plan/0/tool is
// plan[0].tool.
func JSONPath(p jsontext.Pointer) string {
	var b strings.Builder
	for tok := range p.Tokens() {
		if tok != "" && strings.Trim(tok, "0123456789") == "" {
			b.WriteString("[" + tok + "]")
			continue
		}
		if b.Len() > 0 {
			b.WriteByte('.')
		}
		b.WriteString(tok)
	}
	return b.String()
}

// Decode reads the JSON document raw into v strictly: exactly one value,
// member names that match v's field tags exactly (not in another case), no
// name twice in an object, no member v has no field for, valid UTF-8. The
// error says what is wrong and where, in words for the sender.
func Decode(raw []byte, v any) error {
	err := jsonv2.Unmarshal(raw, v, jsonv2.RejectUnknownMembers(true))
	if err == nil {
		return nil
	}
	return &invalidError{msg: decodeMessage(err)}
}

func decodeMessage(err error) string {
	var syn *jsontext.SyntacticError
	if errors.As(err, &syn) {
		switch {
		case errors.Is(syn.Err, jsontext.ErrDuplicateName):
			return fmt.Sprintf("field %q appears twice%s", syn.JSONPointer.LastToken(), in(syn.JSONPointer.Parent()))
		case errors.Is(syn.Err, io.ErrUnexpectedEOF):
			return "the JSON ends too early"
		case strings.HasSuffix(syn.Err.Error(), "after top-level value"):
			return fmt.Sprintf("there is data after the JSON value, at byte %d", syn.ByteOffset)
		}
		return fmt.Sprintf("not valid JSON at byte %d: %s", syn.ByteOffset, strings.TrimPrefix(syn.Err.Error(), "jsontext: "))
	}
	var sem *jsonv2.SemanticError
	if errors.As(err, &sem) {
		switch {
		case errors.Is(sem.Err, jsonv2.ErrUnknownName):
			return fmt.Sprintf("unknown field %q%s", sem.JSONPointer.LastToken(), in(sem.JSONPointer.Parent()))
		case sem.GoType != nil && sem.JSONKind != 0:
			return fmt.Sprintf("%s is %s; want %s", field(sem.JSONPointer), kindName(sem.JSONKind), typeName(sem.GoType))
		case sem.Err != nil:
			return fmt.Sprintf("%s: %s", field(sem.JSONPointer), strings.TrimPrefix(sem.Err.Error(), "json: "))
		}
	}
	return strings.TrimPrefix(err.Error(), "json: ")
}

func in(p jsontext.Pointer) string {
	if p == "" {
		return ""
	}
	return " in " + JSONPath(p)
}

func field(p jsontext.Pointer) string {
	if p == "" {
		return "the document"
	}
	return JSONPath(p)
}

func kindName(k jsontext.Kind) string {
	switch k {
	case 'n':
		return "null"
	case 'f', 't':
		return "a boolean"
	case '"':
		return "a string"
	case '0':
		return "a number that does not fit"
	case '{':
		return "an object"
	case '[':
		return "an array"
	}
	return "a JSON " + k.String()
}

func typeName(t reflect.Type) string {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch t.Kind() {
	case reflect.String:
		return "a string"
	case reflect.Bool:
		return "true or false"
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return "a whole number within " + t.Kind().String() + " range"
	case reflect.Float32, reflect.Float64:
		return "a number"
	case reflect.Slice, reflect.Array:
		return "an array"
	case reflect.Struct, reflect.Map:
		return "an object"
	}
	return t.String()
}

// Compact is a JSON value on one line, without its spacing, for a terminal
// or a page; raw as it is when it is not JSON.
func Compact(raw json.RawMessage) string {
	var b bytes.Buffer
	if json.Compact(&b, raw) != nil {
		return string(raw)
	}
	return b.String()
}
