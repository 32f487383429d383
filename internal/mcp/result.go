package mcp

import (
	"bytes"
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"reflect"
	"strconv"
	"strings"

	mcpsdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/oncerun/oncerun/tools"
)

// Integers of at least maxExactInt and less than maxID in magnitude are
// those a double may have rounded and that are likely ids: from 2⁵³ on a
// double no longer holds every integer (9007199254740993 reads as 2⁵³),
// and 64-bit integers end at 2⁶⁴.
// Numbers beyond that are measurements, for which a double is the norm.
const (
	maxExactInt = 1 << 53
	maxID       = 1 << 64
)

// structured returns a result's structured content with its numbers as the
// server wrote them. The SDK reads structuredContent into Go values, every
// number a float64, so an integer beyond 2⁵³ (a 64-bit id) may come out
// rounded. Servers also send the structured content serialized as a text
// item, as the specification asks: when a text item reads as the same
// value, its JSON is the result, digits and all. Otherwise an integer
// beyond 2⁵³ (and below 2⁶⁴, where ids end) cannot be trusted, and the call's error wraps
// tools.ErrUnstorable: the server answered, so the effect was made, and a
// person says what the result was.
func structured(res *mcpsdk.CallToolResult) (any, error) {
	for _, c := range res.Content {
		t, ok := c.(*mcpsdk.TextContent)
		if !ok {
			continue
		}
		var v any
		if json.Unmarshal([]byte(t.Text), &v) != nil || !reflect.DeepEqual(v, res.StructuredContent) {
			continue
		}
		var compact bytes.Buffer
		if json.Compact(&compact, []byte(t.Text)) == nil {
			return json.RawMessage(compact.Bytes()), nil
		}
	}
	if at, f, ok := inexact(res.StructuredContent, ""); ok {
		return nil, fmt.Errorf("structuredContent holds the number %s at %s, beyond 2^53: the MCP client reads it as a double, "+
			"which may have rounded it, and the server sent no text item with the same JSON to read it exactly: %w",
			strconv.FormatFloat(f, 'f', -1, 64), at, tools.ErrUnstorable)
	}
	return res.StructuredContent, nil
}

// inexact finds, in a value decoded by encoding/json, an integer beyond
// 2⁵³ that a double may have rounded, and where it is.
func inexact(v any, at string) (string, float64, bool) {
	switch v := v.(type) {
	case float64:
		if a := math.Abs(v); a >= maxExactInt && a < maxID && v == math.Trunc(v) {
			return cmp.Or(strings.TrimPrefix(at, "."), "the top level"), v, true
		}
	case map[string]any:
		for k, e := range v {
			if where, f, ok := inexact(e, at+"."+k); ok {
				return where, f, true
			}
		}
	case []any:
		for i, e := range v {
			if where, f, ok := inexact(e, fmt.Sprintf("%s[%d]", at, i)); ok {
				return where, f, true
			}
		}
	}
	return "", 0, false
}

// unreadable reports an error of a call whose answer arrived whole but
// whose result the SDK could not read into its types: a number beyond the
// range of a double (1e400), a member of the wrong type. Such an answer
// comes back the same every time.
func unreadable(err error) bool {
	var typeErr *json.UnmarshalTypeError
	return errors.As(err, &typeErr)
}

// unreadableAnswer is the error of a call answered with a result that
// cannot be read: the server ran it, so the effect was made, and the step
// waits for its paired read or a person (tools.ErrUnstorable) instead of
// being sent again.
func unreadableAnswer(err error) error {
	return fmt.Errorf("the server answered, but its result cannot be read: %w: %w", tools.ErrUnstorable, err)
}
