package mcp

import (
	"cmp"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"

	mcpsdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/oncerun/oncerun/internal/untrusted"
	"github.com/oncerun/oncerun/tools"
)

// Bounds on what a server's tool list puts before the model: a tool's
// description and input schema are sent with every planning turn.
const (
	// MaxDescriptionBytes bounds a tool's description (its title, or its
	// name, when it has none) once escaped: a longer one is refused, not
	// cut, since a cut description may drop what the model needs to call
	// the tool right.
	MaxDescriptionBytes = 8 << 10
	// MaxSchemaBytes bounds a tool's input schema, as JSON.
	MaxSchemaBytes = 64 << 10
)

// Why a tool of an optional server was left out: the reason label of
// oncerun_mcp_tools_left_out_total.
const (
	// ReasonNameCollision: another MCP tool would have the same oncerun
	// name (ctl_out and CTL-OUT are both <server>_ctl_out).
	ReasonNameCollision = "name_collision"
	// ReasonNameTooLong: its oncerun name is past tools.MaxNameLen.
	ReasonNameTooLong = "name_too_long"
	// ReasonDescriptionTooLong: its description is past
	// MaxDescriptionBytes once escaped.
	ReasonDescriptionTooLong = "description_too_long"
	// ReasonSchemaTooLarge: its input schema is past MaxSchemaBytes.
	ReasonSchemaTooLarge = "schema_too_large"
	// ReasonPairedLeftOut: its paired read, or the tool it is the mapped
	// paired read of, was left out.
	ReasonPairedLeftOut = "paired_left_out"
	// ReasonNotOffered: the configuration lists it, and the server does not
	// offer it (a server that dropped a tool).
	ReasonNotOffered = "not_offered"
	// ReasonInvalid: anything else the definition is refused for (a schema
	// that is not an object's or does not compile, an approval field the
	// schema lacks, a retention the registry refuses, a paired read that is
	// not a read, a probe that failed).
	ReasonInvalid = "invalid"
)

// LeftOutTool is a tool of an optional server that was left out at start,
// and why. Its server's other tools are offered.
type LeftOutTool struct {
	// Server is the configured server's name; Tool the tool's name there;
	// Name the oncerun name it would have had.
	Server, Tool, Name string
	// Reason is one of the Reason constants.
	Reason string
	// Err says what is wrong, naming the server and the tool.
	Err error
}

// reasoned is an error of one tool with the reason it would be left out
// for.
type reasoned struct {
	reason string
	err    error
}

func (r *reasoned) Error() string { return r.err.Error() }
func (r *reasoned) Unwrap() error { return r.err }

func because(reason string, err error) error { return &reasoned{reason: reason, err: err} }

// reasonOf is the reason err gives, ReasonInvalid when it gives none.
func reasonOf(err error) string {
	if r, ok := errors.AsType[*reasoned](err); ok {
		return r.reason
	}
	return ReasonInvalid
}

// description is what the model reads of mt: its description (or title,
// or name), with CRLF line ends made LF and every other control or format
// character escaped (untrusted.Escape: a NUL reads \u0000, an ESC
// \u001b), refused past MaxDescriptionBytes.
func description(server string, mt *mcpsdk.Tool) (string, error) {
	text := strings.ReplaceAll(cmp.Or(mt.Description, mt.Title, mt.Name), "\r\n", "\n")
	text = strings.TrimSpace(untrusted.Escape(text))
	if len(text) > MaxDescriptionBytes {
		return "", because(ReasonDescriptionTooLong, fmt.Errorf("its description is %d bytes once escaped, the limit is %d",
			len(text), MaxDescriptionBytes))
	}
	return fmt.Sprintf("[MCP server %s] %s", server, text), nil
}

// candidate is a tool a server offers, before its name is settled.
type candidate struct {
	tool     tools.Tool
	src      Source
	where    string // the server, as errors name it
	optional bool
	// pairedOf names, for a mapped paired read, the tool it stands for.
	pairedOf string
}

// leaveOut records that c's tool is left out, and why.
func (d *Discovered) leaveOut(server, tool, name string, err error) {
	d.LeftOut = append(d.LeftOut, LeftOutTool{Server: server, Tool: tool, Name: name, Reason: reasonOf(err), Err: err})
}

// settle adds the candidates whose names are theirs alone, in order. A
// name several MCP tools would have goes to the one of a required server
// if there is exactly one; the optional servers' tools of it are left out,
// and the required servers' tools of a name two of them would have are an
// error naming every tool of it. A tool whose paired read is left out, or
// the mapped paired read of a tool left out, is left out too.
func (d *Discovered) settle(cands []candidate, reserved []string) []error {
	byName := map[string][]int{}
	for i, c := range cands {
		byName[c.tool.Name] = append(byName[c.tool.Name], i)
	}
	var errs []error
	kept := map[string]int{} // a name and the candidate that has it
	for _, name := range slices.Sorted(maps.Keys(byName)) {
		is := byName[name]
		if slices.Contains(reserved, name) {
			for _, i := range is {
				c := cands[i]
				err := because(ReasonNameCollision, fmt.Errorf("tool name %s of MCP tool %q of server %s is the name of one of the worker's own tools: rename the server or expose another tool",
					name, c.src.Tool, c.src.Server))
				if c.optional {
					d.leaveOut(c.src.Server, c.src.Tool, name, err)
				} else {
					errs = append(errs, err)
				}
			}
			continue
		}
		if len(is) == 1 {
			kept[name] = is[0]
			continue
		}
		var all, required []candidate
		for _, i := range is {
			all = append(all, cands[i])
			if !cands[i].optional {
				kept[name] = i
				required = append(required, cands[i])
			}
		}
		if len(required) > 1 {
			delete(kept, name)
			errs = append(errs, collision(name, all))
		}
		for _, c := range all {
			if c.optional {
				d.leaveOut(c.src.Server, c.src.Tool, name, collision(name, all))
			}
		}
	}
	d.leavePairsOut(cands, kept)
	for i, c := range cands {
		if k, ok := kept[c.tool.Name]; ok && k == i {
			d.Sources[c.tool.Name] = c.src
			d.Tools = append(d.Tools, c.tool)
			d.Warnings = append(d.Warnings, c.src.Warnings...)
		}
	}
	return errs
}

// leavePairsOut leaves out, until none is left, each kept tool of an
// optional server whose paired read is not kept, and each mapped paired
// read whose tool is not.
func (d *Discovered) leavePairsOut(cands []candidate, kept map[string]int) {
	for changed := true; changed; {
		changed = false
		for i, c := range cands {
			if k, ok := kept[c.tool.Name]; !ok || k != i || !c.optional {
				continue
			}
			var lost string
			if _, ok := kept[c.tool.PairedRead]; c.tool.PairedRead != "" && !ok {
				lost = "its paired read " + c.tool.PairedRead + " is left out"
			} else if _, ok := kept[c.pairedOf]; c.pairedOf != "" && !ok {
				lost = c.pairedOf + ", whose paired read it is, is left out"
			} else {
				continue
			}
			delete(kept, c.tool.Name)
			d.leaveOut(c.src.Server, c.src.Tool, c.tool.Name,
				because(ReasonPairedLeftOut, fmt.Errorf("%s: tool %q: %s", c.where, c.src.Tool, lost)))
			changed = true
		}
	}
}

// collision is the error of a name that the tools cs would all have.
func collision(name string, cs []candidate) error {
	tools := make([]string, len(cs))
	for i, c := range cs {
		tools[i] = fmt.Sprintf("MCP tool %q of server %s", c.src.Tool, c.src.Server)
	}
	which := "both " + tools[0] + " and " + tools[1]
	if len(tools) > 2 {
		which = strings.Join(tools[:len(tools)-1], ", ") + " and " + tools[len(tools)-1]
	}
	return because(ReasonNameCollision, fmt.Errorf("tool name %s would name %s: rename a server or expose only one of the tools", name, which))
}
