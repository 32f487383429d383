// Package schema compiles the JSON Schemas oncerun is given (a tool's
// arguments, an MCP server's question) and says in one line why a value
// does not match one. A schema loads nothing: a "$ref" to a file or an
// address is refused, so that a server's schema cannot make a worker read
// its files or reach the network.
package schema

import (
	"errors"
	"fmt"
	"strings"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"golang.org/x/text/language"
	"golang.org/x/text/message"
)

// Compile compiles doc, a decoded JSON document, as the schema at url (a
// name of the caller's, which errors show).
func Compile(url string, doc any) (*jsonschema.Schema, error) {
	c := jsonschema.NewCompiler()
	c.UseLoader(jsonschema.SchemeURLLoader{})
	if err := c.AddResource(url, doc); err != nil {
		return nil, err
	}
	return c.Compile(url)
}

var english = message.NewPrinter(language.English)

// Message flattens a validation error into one line, each cause at the
// place in the value it is about: "at /size: value must be one of ...".
func Message(err error) string {
	var ve *jsonschema.ValidationError
	if !errors.As(err, &ve) {
		return err.Error()
	}
	var parts []string
	for _, leaf := range leaves(ve) {
		parts = append(parts, fmt.Sprintf("at /%s: %s", strings.Join(leaf.InstanceLocation, "/"), leaf.ErrorKind.LocalizedString(english)))
	}
	return strings.Join(parts, "; ")
}

func leaves(ve *jsonschema.ValidationError) []*jsonschema.ValidationError {
	if len(ve.Causes) == 0 {
		return []*jsonschema.ValidationError{ve}
	}
	var out []*jsonschema.ValidationError
	for _, c := range ve.Causes {
		out = append(out, leaves(c)...)
	}
	return out
}
