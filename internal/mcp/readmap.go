package mcp

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"reflect"
	"strconv"
	"strings"

	jsonv2 "github.com/go-json-experiment/json"
	"github.com/go-json-experiment/json/jsontext"

	"github.com/oncerun/oncerun/internal/untrusted"
	"github.com/oncerun/oncerun/tools"
)

// PairedRead is the read tool that tells whether a call's effect exists
// ([ToolConfig.PairedRead]): the string "find_refund" names a read that is
// called with the call's own arguments and answers a boolean "found"; the
// object {tool, args, found} maps a read that answers what it finds, as
// the reference servers' do:
//
//	paired_read:
//	  tool: open_nodes
//	  args: {names: /entities/*/name}   # each argument a JSON Pointer into the call's
//	  found: {pointer: /entities}       # found when the answer's value there is non-empty
type PairedRead struct {
	// Tool is the read's MCP name, a listed tool of the same server.
	Tool string `json:"tool"`
	// Args builds the read's arguments: each property is a JSON Pointer
	// into the call's arguments, whose token "*" takes that property of
	// every element of an array (/entities/*/name is the list of names).
	// Without Args the read is called with the call's own arguments.
	Args map[string]string `json:"args,omitempty"`
	// Found decides from the read's answer whether the effect exists.
	// Without it the answer must be an object with a boolean "found".
	Found *FoundRule `json:"found,omitempty"`
}

// FoundRule says the effect exists when the read's answer has, at Pointer,
// a value that is non-empty (not null, false, "", [] or {}), or, with
// Equals, that value. An answer without a value at Pointer cannot tell,
// and is an error: the step waits for a person rather than sending again.
type FoundRule struct {
	Pointer string         `json:"pointer"`
	Equals  jsontext.Value `json:"equals,omitempty"`
}

// UnmarshalJSON reads a read tool's name or a {tool, args, found} object.
func (p *PairedRead) UnmarshalJSON(b []byte) error {
	var name string
	if err := jsonv2.Unmarshal(b, &name); err == nil {
		*p = PairedRead{Tool: name}
		return nil
	}
	type plain PairedRead
	var v plain
	if err := jsonv2.Unmarshal(b, &v, jsonv2.RejectUnknownMembers(true)); err != nil {
		return fmt.Errorf("paired_read: want a read tool's name or {tool, args, found}: %w", err)
	}
	*p = PairedRead(v)
	return nil
}

// MarshalJSON writes a read without a mapping as its name.
func (p PairedRead) MarshalJSON() ([]byte, error) {
	if !p.mapped() {
		return jsonv2.Marshal(p.Tool)
	}
	type plain PairedRead
	return jsonv2.Marshal(plain(p))
}

// IsZero reports no paired read.
func (p PairedRead) IsZero() bool { return p.Tool == "" && !p.mapped() }

// mapped reports whether the read's arguments or its finding are mapped.
func (p PairedRead) mapped() bool { return p.Args != nil || p.Found != nil }

// problems names what is wrong with the mapping's pointers.
func (p PairedRead) problems() []string {
	var out []string
	for name, ptr := range p.Args {
		if _, err := tokens(ptr); err != nil {
			out = append(out, fmt.Sprintf("paired_read args.%s: %v", name, err))
		}
	}
	if f := p.Found; f != nil {
		if _, err := tokens(f.Pointer); err != nil {
			out = append(out, fmt.Sprintf("paired_read found.pointer: %v", err))
		} else if strings.Contains(f.Pointer, "/*") {
			out = append(out, fmt.Sprintf("paired_read found.pointer %q: a * belongs in args, not in found", f.Pointer))
		}
		if len(f.Equals) > 0 && !f.Equals.IsValid() {
			out = append(out, "paired_read found.equals: not a JSON value")
		}
	}
	return out
}

// tokens splits a JSON Pointer ("" is the whole document).
func tokens(ptr string) ([]string, error) {
	if ptr == "" {
		return nil, nil
	}
	if !strings.HasPrefix(ptr, "/") {
		return nil, fmt.Errorf("%q is not a JSON Pointer (one starts with /)", ptr)
	}
	p := jsontext.Pointer(ptr)
	if !p.IsValid() {
		return nil, fmt.Errorf("%q is not a valid JSON Pointer", ptr)
	}
	var out []string
	for t := range p.Tokens() {
		out = append(out, t)
	}
	return out, nil
}

// at is the value of doc at the pointer's tokens; "*" maps the rest over
// an array's elements. ok is false when the path is not in doc.
func at(doc any, toks []string) (any, bool) {
	if len(toks) == 0 {
		return doc, true
	}
	tok, rest := toks[0], toks[1:]
	switch v := doc.(type) {
	case map[string]any:
		e, ok := v[tok]
		if !ok {
			return nil, false
		}
		return at(e, rest)
	case []any:
		if tok == "*" {
			out := make([]any, 0, len(v))
			for _, e := range v {
				x, ok := at(e, rest)
				if !ok {
					return nil, false
				}
				out = append(out, x)
			}
			return out, true
		}
		i, err := strconv.Atoi(tok)
		if err != nil || i < 0 || i >= len(v) {
			return nil, false
		}
		return at(v[i], rest)
	}
	return nil, false
}

// readArgs builds the read's arguments from the call's.
func (p PairedRead) readArgs(call json.RawMessage) (json.RawMessage, error) {
	if p.Args == nil {
		return call, nil
	}
	var doc any
	if err := json.Unmarshal(call, &doc); err != nil {
		return nil, fmt.Errorf("the call's arguments: %w", err)
	}
	out := make(map[string]any, len(p.Args))
	for name, ptr := range p.Args {
		toks, _ := tokens(ptr) // checked by Validate
		v, ok := at(doc, toks)
		if !ok {
			return nil, fmt.Errorf("argument %s: %s is not in the call's arguments", name, ptr)
		}
		out[name] = v
	}
	return json.Marshal(out)
}

// found decides from the read's answer whether the effect exists.
func (p PairedRead) found(read string, answer json.RawMessage) (bool, error) {
	if p.Found == nil {
		return tools.Found(read, answer)
	}
	var doc any
	if err := json.Unmarshal(answer, &doc); err != nil {
		return false, fmt.Errorf("paired read %s answered no JSON: %w", read, err)
	}
	toks, _ := tokens(p.Found.Pointer)
	v, ok := at(doc, toks)
	if !ok {
		// An answer of another shape (a wrapped result, an error sent as
		// text) cannot tell: not found would send the call again.
		return false, fmt.Errorf("paired read %s answered without %s, so it cannot tell whether the effect exists: %s",
			read, cmp.Or(p.Found.Pointer, "a value"), untrusted.Cut(string(answer), 200))
	}
	if len(p.Found.Equals) > 0 {
		var want any
		if err := json.Unmarshal(p.Found.Equals, &want); err != nil {
			return false, err
		}
		return reflect.DeepEqual(v, want), nil
	}
	switch v := v.(type) {
	case nil:
		return false, nil
	case bool:
		return v, nil
	case string:
		return v != "", nil
	case []any:
		return len(v) > 0, nil
	case map[string]any:
		return len(v) > 0, nil
	}
	return true, nil
}

// mappedRead is the oncerun read tool that stands for a mapped paired read
// of effect: it takes the effect's arguments, calls the server's read with
// the mapped ones and answers {"found": bool, "answer": <the read's
// answer>}, the answer every paired read gives.
func mappedRead(srv *server, effect tools.Tool, p PairedRead, name string) tools.Tool {
	read := srv.runner(p.Tool, false, tools.DefaultTimeout, srv.usesTasks(p.Tool, TaskAuto))
	how := "its answer's boolean found"
	if f := p.Found; f != nil {
		how = fmt.Sprintf("its answer's %s non-empty", cmp.Or(f.Pointer, "(whole answer)"))
		if len(f.Equals) > 0 {
			how = fmt.Sprintf("its answer's %s equal to %s", cmp.Or(f.Pointer, "(whole answer)"), f.Equals)
		}
	}
	return tools.Tool{
		Name: name, Class: tools.ClassRead, Schema: effect.Schema,
		Description: fmt.Sprintf("[MCP server %s] Whether a call of %s took effect, by %s: %s", srv.cfg.Name, effect.Name, p.Tool, how),
		Run: func(ctx context.Context, call tools.Call) (any, error) {
			args, err := p.readArgs(call.Args)
			if err != nil {
				return nil, tools.Permanent(fmt.Errorf("paired read %s of %s: %w", p.Tool, effect.Name, err))
			}
			res, err := read(ctx, tools.Call{Key: call.Key, Args: args})
			if err != nil {
				return nil, err
			}
			answer, err := json.Marshal(res)
			if err != nil {
				return nil, fmt.Errorf("the paired read's answer is not JSON: %w", err)
			}
			found, err := p.found(p.Tool, answer)
			if err != nil {
				return nil, err
			}
			return map[string]any{"found": found, "answer": json.RawMessage(answer)}, nil
		},
	}
}
