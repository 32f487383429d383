package untrusted

import (
	"bytes"
	"encoding/json"
	"math"
	"math/big"
	"strconv"
	"strings"

	"github.com/go-json-experiment/json/jsontext"
)

// MaxNumberBytes bounds the literal of a number in a [Value]: more digits
// than any integer or decimal a program exchanges (a 64-bit integer has 20,
// a double's shortest form at most 24, a 128-bit decimal about 40), and far
// fewer than PostgreSQL's numeric type can hold.
const MaxNumberBytes = 100

// Value checks a JSON value that oncerun stores, carries and compares as it
// came from the world, such as a tool's result or a provider's answer: at
// most maxBytes bytes of valid JSON nesting at most MaxJSONDepth deep, no
// NUL in any string (PostgreSQL's jsonb cannot hold one), and every number
// one that can be read back as a number: within the range of an IEEE 754
// double (1e400 would read as infinity, 1e-400 as zero) and at most
// MaxNumberBytes long.
//
// It is the rule of what can be kept, not of what people write: other
// control characters are data, kept as they came and escaped wherever they
// are shown ([Escape]); what people send is also held to [JSON]'s rule.
// Integers beyond 2⁵³ are accepted: a Value is kept as its JSON text and
// compared by [Equal], which reads numbers exactly. (Arguments, which are
// hashed, follow the stricter rule of their canonical form: see
// internal/keys.)
func Value(field string, raw []byte, maxBytes int) error {
	if len(raw) > maxBytes {
		return invalid("%s is %d bytes; the limit is %d", field, len(raw), maxBytes)
	}
	return walk(field, raw, rules{numbers: true})
}

// number checks one number literal of a Value at p.
func number(field, lit string, p jsontext.Pointer) error {
	if len(lit) > MaxNumberBytes {
		return invalid("%s holds a number of %d characters at %s; the limit is %d: send it as a string",
			field, len(lit), where(p), MaxNumberBytes)
	}
	f, err := strconv.ParseFloat(lit, 64)
	if err != nil || math.IsInf(f, 0) {
		return invalid("%s holds the number %s at %s, beyond the range of a double (about ±1.8e308): send it as a string",
			field, lit, where(p))
	}
	if f == 0 && strings.Trim(mantissa(lit), "0.") != "" {
		return invalid("%s holds the number %s at %s, too small for a double (it would read as 0): send it as a string",
			field, lit, where(p))
	}
	return nil
}

// mantissa is a number literal without its sign and exponent.
func mantissa(lit string) string {
	lit = strings.TrimPrefix(lit, "-")
	if i := strings.IndexAny(lit, "eE"); i >= 0 {
		lit = lit[:i]
	}
	return lit
}

// Equal reports whether two JSON documents are the same value: objects
// with the same members in any order, arrays with the same elements in
// order, and numbers of the same exact value however they are written (1,
// 1.0 and 1e0 are equal; 9007199254740993 and 9007199254740992 are not,
// although a double cannot tell them apart). An empty document equals only
// an empty one. Documents that are not JSON, or whose numbers [Value]
// refuses, are an error.
func Equal(a, b []byte) (bool, error) {
	if len(bytes.TrimSpace(a)) == 0 || len(bytes.TrimSpace(b)) == 0 {
		return len(bytes.TrimSpace(a)) == len(bytes.TrimSpace(b)), nil
	}
	va, err := decodeExact(a)
	if err != nil {
		return false, err
	}
	vb, err := decodeExact(b)
	if err != nil {
		return false, err
	}
	return equalValues(va, vb), nil
}

// decodeExact decodes raw with its numbers as literals, after checking
// them as Value does so that no literal is too long to read exactly.
func decodeExact(raw []byte) (any, error) {
	if err := walk("the value", raw, rules{numbers: true}); err != nil {
		return nil, err
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, invalid("the value is not valid JSON: %s", strings.TrimPrefix(err.Error(), "json: "))
	}
	return v, nil
}

func equalValues(a, b any) bool {
	switch a := a.(type) {
	case map[string]any:
		b, ok := b.(map[string]any)
		if !ok || len(a) != len(b) {
			return false
		}
		for k, va := range a {
			vb, ok := b[k]
			if !ok || !equalValues(va, vb) {
				return false
			}
		}
		return true
	case []any:
		b, ok := b.([]any)
		if !ok || len(a) != len(b) {
			return false
		}
		for i := range a {
			if !equalValues(a[i], b[i]) {
				return false
			}
		}
		return true
	case json.Number:
		b, ok := b.(json.Number)
		if !ok {
			return false
		}
		ra, okA := new(big.Rat).SetString(string(a))
		rb, okB := new(big.Rat).SetString(string(b))
		return okA && okB && ra.Cmp(rb) == 0
	}
	// A string, a boolean or null: values of one kind compare as Go
	// values, and values of two kinds ("true" and true) differ.
	return a == b
}
