package mcp_test

import (
	"encoding/json"
	"testing"

	"github.com/go-json-experiment/json/jsontext"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/oncerun/oncerun/internal/mcp"
	"github.com/oncerun/oncerun/internal/planner"
	"github.com/oncerun/oncerun/tools"
)

// A tool's annotations are its defaults and the configuration is the word
// of record: readOnlyHint makes a read; a tool that is not read-only needs
// approval unless destructiveHint is false, with annotations or without
// (MCP defaults a tool to destructive); what the configuration says wins,
// and where it contradicts an annotation the load warns, naming both.
func TestAnnotationsAreDefaultsAndTheConfigurationTheWordOfRecord(t *testing.T) {
	t.Parallel()
	s := startHTTP(t, annotated)
	cfg := httpConfig("mem", s.URL, map[string]mcp.ToolConfig{
		"read_graph":      {},
		"delete_entities": {Class: tools.ClassRead},
		"add_note":        {},
		"forget":          {},
		"wipe":            {Approval: mcp.Approval{Rule: "never"}},
		"echo":            {Class: tools.ClassExternal},
	})
	cfg.Unlisted = mcp.UnlistedApprove
	d := load(t, cfg)
	reg, err := tools.NewRegistry(tools.RegistryConfig{}, d.Tools...)
	require.NoError(t, err)

	for _, tc := range []struct {
		tool                    string
		class                   tools.Class
		approval                bool
		classFrom, approvalFrom string
	}{
		{"mem_read_graph", tools.ClassRead, false, mcp.FromAnnotation, mcp.FromDefault},
		{"mem_delete_entities", tools.ClassRead, false, mcp.FromConfig, mcp.FromDefault},
		{"mem_add_note", tools.ClassExternal, false, mcp.FromDefault, mcp.FromAnnotation},
		{"mem_forget", tools.ClassExternal, true, mcp.FromDefault, mcp.FromDefault},
		{"mem_wipe", tools.ClassExternal, false, mcp.FromDefault, mcp.FromConfig},
		// Classed an effect by the file, read-only by its server: an
		// effect, which is destructive unless the server says otherwise.
		{"mem_echo", tools.ClassExternal, true, mcp.FromConfig, mcp.FromDefault},
		// Unlisted: a read-only tool is a read, any other waits for a person.
		{"mem_mystery", tools.ClassExternal, true, mcp.FromDefault, mcp.FromUnlisted},
		// readOnlyHint and destructiveHint: true: not a read.
		{"mem_purge", tools.ClassExternal, true, mcp.FromAnnotation, mcp.FromUnlisted},
	} {
		tool := toolOf(t, d, tc.tool)
		assert.Equal(t, tc.class, tool.Class, tc.tool)
		p, err := reg.Prepare(planner.Call{Tool: tc.tool, Args: json.RawMessage(`{}`)})
		require.NoError(t, err, tc.tool)
		assert.Equal(t, tc.approval, p.NeedsApproval, tc.tool)
		src := d.Sources[tc.tool]
		assert.Equal(t, tc.classFrom, src.ClassFrom, "%s: class from", tc.tool)
		assert.Equal(t, tc.approvalFrom, src.ApprovalFrom, "%s: approval from", tc.tool)
	}
	assert.True(t, d.Sources["mem_add_note"].Hints.Idempotent, "idempotentHint is kept")
	assert.False(t, d.Sources["mem_wipe"].Hints.Annotated)
	assert.True(t, d.Sources["mem_forget"].Hints.Destructive, "destructiveHint left out is true")

	require.Len(t, d.Warnings, 3, "%q", d.Warnings)
	assert.Contains(t, d.Warnings[0], `tool "delete_entities" is configured class: read, and the server annotates it destructive`)
	assert.Contains(t, d.Warnings[1], `tool "echo" is configured class: external, and the server annotates it readOnlyHint`)
	assert.Contains(t, d.Warnings[2], `tool "purge" is annotated both readOnlyHint and destructiveHint: true`)
	assert.Equal(t, d.Warnings[0:1], d.Sources["mem_delete_entities"].Warnings, "each tool carries its own warnings")
	assert.Empty(t, d.Sources["mem_read_graph"].Warnings)
}

// With unlisted: approve, a tool its server marks read-only is exposed as
// a read that needs no approval (echo of the reference server); any other
// waits for a person.
func TestAnUnlistedReadOnlyToolIsARead(t *testing.T) {
	t.Parallel()
	s := startHTTP(t, annotated)
	cfg := httpConfig("mem", s.URL, nil)
	cfg.Unlisted = mcp.UnlistedApprove
	d := load(t, cfg)
	echo := toolOf(t, d, "mem_echo")
	assert.Equal(t, tools.ClassRead, echo.Class)
	need, _, err := echo.Approval.Needs(json.RawMessage(`{}`))
	require.NoError(t, err)
	assert.False(t, need)
	assert.Equal(t, mcp.FromAnnotation, d.Sources["mem_echo"].ApprovalFrom)
	del := toolOf(t, d, "mem_delete_entities")
	need, _, err = del.Approval.Needs(json.RawMessage(`{}`))
	require.NoError(t, err)
	assert.True(t, need)
	assert.Equal(t, tools.EditForbidden, del.Edits)
	assert.Equal(t, mcp.FromUnlisted, d.Sources["mem_delete_entities"].ApprovalFrom)
}

// A paired read the configuration does not class is a read when its
// server annotates it readOnlyHint; one it does not annotate so is
// refused at discovery, naming both tools.
func TestAPairedReadMayBeAReadByItsAnnotation(t *testing.T) {
	t.Parallel()
	s := startHTTP(t, honouring)
	d := load(t, httpConfig("pay", s.URL, map[string]mcp.ToolConfig{
		"refund": {PairedRead: mcp.PairedRead{Tool: "find_refund"}}, "find_refund": {},
	}))
	assert.Equal(t, tools.ClassRead, toolOf(t, d, "pay_find_refund").Class)
	assert.Equal(t, tools.GuaranteeOnce, toolOf(t, d, "pay_refund").Guarantee())

	notRead := httpConfig("pay", s.URL, map[string]mcp.ToolConfig{"refund": {PairedRead: mcp.PairedRead{Tool: "decline"}}, "decline": {}})
	msg := loadErr(t, notRead)
	assert.Contains(t, msg, `tool "refund": paired_read "decline" is not a read: the server does not annotate it read-only`)

	// Of an optional server, the tool is left out and the rest offered.
	notRead.Optional = true
	d = load(t, notRead)
	assert.Equal(t, []string{"pay_decline"}, names(d))
	require.Len(t, d.LeftOut, 1)
	assert.Equal(t, []string{"refund", mcp.ReasonInvalid}, []string{d.LeftOut[0].Tool, d.LeftOut[0].Reason})
}

// A paired read by mapping: the read's arguments are built from the call's
// by JSON Pointer (each entity's name), and found is decided from what it
// answers (entities non-empty), as the reference memory server's
// open_nodes answers. The oncerun tool standing for it answers the found
// and the read's answer, like any paired read.
func TestAPairedReadByMappingAsksAReadThatAnswersWhatItFinds(t *testing.T) {
	t.Parallel()
	_, d := graphWith(t, &mcp.FoundRule{Pointer: "/entities"})
	create := toolOf(t, d, "mem_create_entities")
	assert.Equal(t, "mem_create_entities_found", create.PairedRead)
	assert.Equal(t, tools.GuaranteeOnce, create.Guarantee(), "a paired read can tell")
	check := toolOf(t, d, create.PairedRead)
	assert.Equal(t, tools.ClassRead, check.Class)
	_, err := tools.NewRegistry(tools.RegistryConfig{}, d.Tools...)
	require.NoError(t, err, "the registry takes the effect and its paired read")

	args := `{"entities":[{"name":"Ada","entityType":"person","observations":[]}]}`
	var answer struct {
		Found  bool            `json:"found"`
		Answer json.RawMessage `json:"answer"`
	}
	require.NoError(t, run(t, check, callOf(t, create.Name, 1, args), &answer))
	assert.False(t, answer.Found, "nothing made yet")
	require.NoError(t, run(t, create, callOf(t, create.Name, 1, args), nil))
	require.NoError(t, run(t, check, callOf(t, create.Name, 1, args), &answer))
	assert.True(t, answer.Found)
	assert.JSONEq(t, `{"entities":[{"name":"Ada","entityType":"person","observations":[]}],"relations":[]}`, string(answer.Answer))

	err = run(t, check, callOf(t, create.Name, 1, `{"things":[]}`), nil)
	require.Error(t, err)
	assert.True(t, permanent(err), "arguments the mapping cannot read are not retried")
	assert.Contains(t, err.Error(), "argument names: /entities/*/name is not in the call's arguments")
}

// A found rule with equals holds the read's value to it; the mapping's
// pointers are checked with the configuration.
func TestAPairedReadMappingIsCheckedAndMayCompareAValue(t *testing.T) {
	t.Parallel()
	s, d := graphWith(t, &mcp.FoundRule{Pointer: "/entities/0/name", Equals: jsontext.Value(`"Ada"`)})
	create, check := toolOf(t, d, "mem_create_entities"), toolOf(t, d, "mem_create_entities_found")
	args := `{"entities":[{"name":"Ada","entityType":"person","observations":[]}]}`
	require.NoError(t, run(t, create, callOf(t, create.Name, 1, args), nil))
	var answer struct{ Found bool }
	require.NoError(t, run(t, check, callOf(t, create.Name, 1, args), &answer))
	assert.True(t, answer.Found)

	cfg := mcp.Config{Servers: []mcp.ServerConfig{httpConfig("mem", s.URL, map[string]mcp.ToolConfig{
		"create_entities": {PairedRead: mcp.PairedRead{Tool: "open_nodes",
			Args: map[string]string{"names": "entities/*/name"}, Found: &mcp.FoundRule{Pointer: "/entities/*"}}},
		"open_nodes": {},
	})}}
	err := cfg.Validate()
	require.Error(t, err)
	assert.Contains(t, err.Error(), `paired_read args.names: "entities/*/name" is not a JSON Pointer`)
	assert.Contains(t, err.Error(), `paired_read found.pointer "/entities/*": a * belongs in args`)
}

// A tool the file says only what an effect has (a paired read, amounts, a
// key its server honours) stays an effect though its server annotates it
// readOnlyHint, with a warning: a hint never turns a keyed, approved
// effect into an unkeyed read.
func TestAToolConfiguredAsAnEffectStaysOneWhateverItsHint(t *testing.T) {
	t.Parallel()
	s := startHTTP(t, annotated)
	d := load(t, httpConfig("mem", s.URL, map[string]mcp.ToolConfig{
		"read_graph": {PairedRead: mcp.PairedRead{Tool: "echo"}},
		"echo":       {},
	}))
	graph := toolOf(t, d, "mem_read_graph")
	assert.Equal(t, tools.ClassExternal, graph.Class)
	assert.Equal(t, "mem_echo", graph.PairedRead)
	assert.Equal(t, mcp.FromConfig, d.Sources["mem_read_graph"].ClassFrom)
	require.Len(t, d.Warnings, 1)
	assert.Contains(t, d.Warnings[0], `tool "read_graph" is configured as an effect (paired_read, idempotent, amounts or edits), and the server annotates it readOnlyHint`)
}

// A mapped read whose answer has no value where the mapping looks (a
// wrapped result, an error sent as text) cannot tell: it is an error, so
// that the step waits for a person rather than being sent again.
func TestAMappedReadThatCannotTellIsAnError(t *testing.T) {
	t.Parallel()
	_, d := graphWith(t, &mcp.FoundRule{Pointer: "/result/entities"})
	err := run(t, toolOf(t, d, "mem_create_entities_found"), callOf(t, "mem_create_entities", 1,
		`{"entities":[{"name":"Ada","entityType":"person","observations":[]}]}`), nil)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "paired read open_nodes answered without /result/entities, so it cannot tell whether the effect exists")
}

// graphWith serves the graph server and loads its create_entities with a
// paired read by mapping: open_nodes asked for the call's entity names,
// found as found says.
func graphWith(t *testing.T, found *mcp.FoundRule) (*httpServer, mcp.Discovered) {
	t.Helper()
	s := startHTTP(t, graph)
	return s, load(t, httpConfig("mem", s.URL, map[string]mcp.ToolConfig{
		"create_entities": {PairedRead: mcp.PairedRead{Tool: "open_nodes",
			Args: map[string]string{"names": "/entities/*/name"}, Found: found}},
		"open_nodes": {},
	}))
}

// A tool annotated both readOnlyHint and destructiveHint: true is not a
// read: destroying is not reading, so the safer of the two is taken (an
// effect, approved on every call), with a warning naming the server and
// the tool. Unlisted, it waits for a person as any effect does; classed
// read by the file, the file is followed and the warning stays.
func TestAToolAnnotatedReadOnlyAndDestructiveIsNotARead(t *testing.T) {
	t.Parallel()
	s := startHTTP(t, annotated)
	for _, tc := range []struct {
		name         string
		tools        map[string]mcp.ToolConfig
		class        tools.Class
		approval     bool
		approvalFrom string
	}{
		{"listed", map[string]mcp.ToolConfig{"purge": {}}, tools.ClassExternal, true, mcp.FromAnnotation},
		{"unlisted", nil, tools.ClassExternal, true, mcp.FromUnlisted},
		{"classed read by the file", map[string]mcp.ToolConfig{"purge": {Class: tools.ClassRead}}, tools.ClassRead, false, mcp.FromDefault},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			cfg := httpConfig("mem", s.URL, tc.tools)
			cfg.Unlisted = mcp.UnlistedApprove
			d := load(t, cfg)
			purge := toolOf(t, d, "mem_purge")
			assert.Equal(t, tc.class, purge.Class)
			need, _, err := purge.Approval.Needs(json.RawMessage(`{}`))
			require.NoError(t, err)
			assert.Equal(t, tc.approval, need)
			assert.Equal(t, tc.approvalFrom, d.Sources["mem_purge"].ApprovalFrom)
			warnings := d.Sources["mem_purge"].Warnings
			require.Len(t, warnings, 1, "%q", warnings)
			assert.Contains(t, warnings[0], `MCP server mem (http `+s.URL+`): tool "purge" is annotated both readOnlyHint and destructiveHint: true`)
			assert.Contains(t, d.Warnings, warnings[0])
		})
	}
}
