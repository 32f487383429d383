package mcp

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	mcpsdk "github.com/modelcontextprotocol/go-sdk/mcp"
	"go.uber.org/zap"

	"github.com/oncerun/oncerun/tools"
)

// DefaultConnectTimeout bounds connecting to one server and listing its
// tools.
const DefaultConnectTimeout = 10 * time.Second

// Options configures [Load].
type Options struct {
	// Registry is what each tool's definition is checked against: pass the
	// worker registry's own, so that a retention window it would refuse is
	// refused here, naming the server and the tool. Zero: its defaults.
	Registry tools.RegistryConfig
	// ConnectTimeout bounds connecting to one server and listing its tools,
	// and reconnecting later. Default DefaultConnectTimeout.
	ConnectTimeout time.Duration
	// LookupEnv reads the bearer tokens' variables and what stdio servers
	// inherit. Default os.LookupEnv.
	LookupEnv func(string) (string, bool)
	// Stderr receives the standard error of stdio servers. Default
	// os.Stderr.
	Stderr io.Writer
	// Log records reconnections. Default: no logging.
	Log *zap.Logger
	// Probe runs the configured probes of idempotent: true claims
	// ([ToolConfig.Probe]). A worker's start sets it; the CLI and the
	// approvals service do not, so that asking a server for its tools makes
	// no effect.
	Probe bool
	// Reserved are the names of the tools the worker has besides its MCP
	// servers' (the built-in and the deployment's own): an optional
	// server's tool of one of these names is left out, a required
	// server's fails the load.
	Reserved []string
}

// WithDefaults returns o with zero fields set to their defaults.
func (o Options) WithDefaults() Options {
	o.ConnectTimeout = cmp.Or(o.ConnectTimeout, DefaultConnectTimeout)
	if o.LookupEnv == nil {
		o.LookupEnv = os.LookupEnv
	}
	if o.Stderr == nil {
		o.Stderr = os.Stderr
	}
	if o.Log == nil {
		o.Log = zap.NewNop()
	}
	return o
}

// Source says where an oncerun tool made from an MCP tool comes from, for
// `oncerun tools` to show.
type Source struct {
	// Server is the configured server's name.
	Server string
	// Transport is TransportHTTP or TransportStdio.
	Transport string
	// Tool is the tool's name at the server.
	Tool string
	// Idempotent says the server honours the idempotency key.
	Idempotent bool
	// Unlisted says the tool is not in the configuration and is exposed by
	// the server's unlisted: approve.
	Unlisted bool
	// ClassFrom and ApprovalFrom say where the tool's class and approval
	// rule come from: FromConfig, FromAnnotation, FromDefault or (approval
	// of an unlisted tool) FromUnlisted.
	ClassFrom, ApprovalFrom string
	// Hints are the server's annotations of the tool, as it declared them.
	Hints Hints
	// Warnings name each configured property of the tool that its
	// server's annotations contradict, and annotations that contradict
	// each other (see [Discovered.Warnings]).
	Warnings []string
	// KeyClaim says on what the tool's "server honours the key" rests:
	// KeyDeclared, KeyVerified, KeyUnverified, or "" for no such claim.
	KeyClaim string
	// TaskSupport is the tool's execution.taskSupport as the server
	// listed it (optional, required, forbidden, or ""); Tasks says its
	// calls run as tasks.
	TaskSupport string
	Tasks       bool
}

// What a tool's claim that its server honours the key rests on.
const (
	// KeyDeclared: the server declares SEP-3182's tools.idempotency.
	KeyDeclared = "declared"
	// KeyVerified: the configuration says idempotent: true, and the probe
	// at start found a second call under one key answered as the first.
	KeyVerified = "verified"
	// KeyUnverified: the configuration says so, and nothing checked it.
	KeyUnverified = "unverified"
)

// Where a property of an MCP tool comes from ([Source]).
const (
	// FromConfig: the configuration says it, and is the word of record.
	FromConfig = "configuration"
	// FromAnnotation: the server's annotation (readOnlyHint,
	// destructiveHint) says it, and the configuration does not.
	FromAnnotation = "annotation"
	// FromDefault: neither says it; the specification's default applies
	// (a tool that is not read-only is destructive).
	FromDefault = "default"
	// FromUnlisted: the tool is not configured and unlisted: approve
	// exposes it, every call waiting for a person.
	FromUnlisted = "unlisted"
)

// Hints are a tool's MCP annotations. They are the server's word, which
// servers get wrong: oncerun takes them as defaults only.
type Hints struct {
	// Annotated says the server sent annotations at all.
	Annotated bool `json:"annotated"`
	// ReadOnly is readOnlyHint: the tool does not change its environment.
	ReadOnly bool `json:"read_only"`
	// Destructive is destructiveHint, true when the server left it out (the
	// specification's default); meaningful only when not ReadOnly.
	Destructive bool `json:"destructive"`
	// Idempotent is idempotentHint: calling the tool again with the same
	// arguments has no further effect. Shown, not acted on: oncerun
	// resends nothing on a server's word alone.
	Idempotent bool `json:"idempotent"`
}

// hintsOf reads a tool's annotations, nil when it has none.
func hintsOf(a *mcpsdk.ToolAnnotations) Hints {
	if a == nil {
		return Hints{Destructive: true}
	}
	return Hints{Annotated: true, ReadOnly: a.ReadOnlyHint, Destructive: a.DestructiveHint == nil || *a.DestructiveHint,
		Idempotent: a.IdempotentHint}
}

// destructive reports whether the hints make a tool one that may destroy:
// not read-only, and destructive by its hint or by default.
func (h Hints) destructive() bool { return !h.ReadOnly && h.Destructive }

// selfContradicting reports annotations that say both readOnlyHint and,
// explicitly, destructiveHint: true. A tool that destroys is not
// read-only whatever else it says: oncerun takes the safer of the two and
// does not make it a read.
func selfContradicting(a *mcpsdk.ToolAnnotations) bool {
	return a != nil && a.ReadOnlyHint && a.DestructiveHint != nil && *a.DestructiveHint
}

// SkippedServer is an optional server that was down at start.
type SkippedServer struct {
	Name string
	Err  error
}

// Discovered is the tools of the configured MCP servers. Its sessions stay
// open for the tools' calls until Close.
type Discovered struct {
	// Tools are the tools, sorted by name, ready for tools.NewRegistry.
	Tools []tools.Tool
	// Sources maps each tool's name to where it comes from.
	Sources map[string]Source
	// Skipped are the optional servers that were down, with why.
	Skipped []SkippedServer
	// LeftOut are the tools of optional servers that were left out, with
	// why; their servers' other tools are in Tools.
	LeftOut []LeftOutTool
	// Warnings name each configured property that contradicts the server's
	// annotation of the tool (a destructive tool classed read), server,
	// tool and both sides; the configuration is followed. They also name
	// each tool annotated both readOnlyHint and destructiveHint: true,
	// which is taken as not read-only.
	Warnings []string

	servers []*server
}

// Close closes the sessions. The tools answer an error afterwards.
func (d Discovered) Close() error {
	errs := make([]error, len(d.servers))
	var wg sync.WaitGroup
	for i, s := range d.servers {
		wg.Go(func() { errs[i] = s.close() })
	}
	wg.Wait()
	return errors.Join(errs...)
}

// Load connects to every configured server, lists its tools (following
// pagination) and makes one oncerun tool of each listed one (or, with
// unlisted: approve, of every one). It refuses, naming the server and the
// tool: a server that is down and not optional, a listed tool the server
// does not offer, names that collide or are too long once prefixed, a
// description past MaxDescriptionBytes or an input schema past
// MaxSchemaBytes, an input schema that is not an object schema or that
// the tool registry refuses, and an approval field the schema does not
// have. Every problem is named in one error. A tool of an optional server
// with such a problem is left out instead ([Discovered.LeftOut]), and so
// is each tool of an optional server whose name a tool of a required
// server also has.
func Load(ctx context.Context, cfg Config, opts Options) (Discovered, error) {
	if err := cfg.Validate(); err != nil {
		return Discovered{}, fmt.Errorf("mcp config: %w", err)
	}
	opts = opts.WithDefaults()
	type listing struct {
		srv   *server
		tools []*mcpsdk.Tool
		err   error
	}
	listings := make([]listing, len(cfg.Servers))
	var wg sync.WaitGroup
	for i, sc := range cfg.Servers {
		wg.Go(func() {
			srv, offered, err := connect(ctx, sc, opts)
			listings[i] = listing{srv, offered, err}
		})
	}
	wg.Wait()

	d := Discovered{Sources: map[string]Source{}}
	var errs []error
	var cands []candidate
	for i, l := range listings {
		if l.srv != nil {
			d.servers = append(d.servers, l.srv)
		}
		switch {
		case l.err != nil && l.srv != nil && cfg.Servers[i].Optional:
			// Down, not misconfigured: an optional server may be.
			d.Skipped = append(d.Skipped, SkippedServer{Name: cfg.Servers[i].Name, Err: l.err})
		case l.err != nil:
			errs = append(errs, l.err)
		default:
			found, bad := d.add(ctx, l.srv, l.tools, opts)
			cands, errs = append(cands, found...), append(errs, bad...)
		}
	}
	errs = append(errs, d.settle(cands, opts.Reserved)...)
	if len(errs) > 0 {
		_ = d.Close()
		return Discovered{}, errors.Join(errs...)
	}
	slices.SortFunc(d.Tools, func(a, b tools.Tool) int { return strings.Compare(a.Name, b.Name) })
	return d, nil
}

// connect opens a session to the server and lists its tools.
func connect(ctx context.Context, sc ServerConfig, opts Options) (*server, []*mcpsdk.Tool, error) {
	srv, err := newServer(sc, opts)
	if err != nil {
		return nil, nil, fmt.Errorf("MCP server %s: %w", sc.Name, err)
	}
	cs, err := srv.session(ctx)
	if err != nil {
		return srv, nil, err
	}
	lctx, cancel := context.WithTimeout(ctx, opts.ConnectTimeout)
	defer cancel()
	var offered []*mcpsdk.Tool
	for t, err := range cs.Tools(lctx, nil) {
		if err != nil {
			return srv, nil, fmt.Errorf("list the tools of %s: %w", srv.describe(), err)
		}
		offered = append(offered, t)
	}
	return srv, offered, nil
}

// add makes the tools of srv from what it offers, for settle to name. A
// tool of an optional server that cannot be made is left out.
func (d *Discovered) add(ctx context.Context, srv *server, offered []*mcpsdk.Tool, opts Options) ([]candidate, []error) {
	sc := srv.cfg
	var cands []candidate
	var errs []error
	// problem records err of tool: an error, or, of an optional server,
	// the reason the tool is left out.
	problem := func(tool string, err error) {
		if sc.Optional {
			d.leaveOut(sc.Name, tool, ToolName(sc.Name, tool), err)
			return
		}
		errs = append(errs, err)
	}
	byName := make(map[string]*mcpsdk.Tool, len(offered))
	for _, t := range offered {
		byName[t.Name] = t
	}
	include := make(map[string]bool)
	for _, name := range slices.Sorted(maps.Keys(sc.Tools)) {
		if _, ok := byName[name]; !ok {
			problem(name, because(ReasonNotOffered, fmt.Errorf("%s: tool %q is configured but the server does not offer it (it offers: %s)",
				srv.describe(), name, offeredNames(offered))))
			continue
		}
		include[name] = true
	}
	if sc.Unlisted == UnlistedApprove {
		for name := range byName {
			include[name] = true
		}
	}
	oncerunName := make(map[string]string, len(include))
	for name := range include {
		oncerunName[name] = ToolName(sc.Name, name)
	}
	classOf := map[string]tools.Class{}
	for _, name := range slices.Sorted(maps.Keys(include)) {
		t, src, err := build(srv, byName[name], oncerunName, opts)
		if err != nil {
			problem(name, fmt.Errorf("%s: tool %q: %w", srv.describe(), name, err))
			continue
		}
		classOf[name] = t.Class
		src.Warnings = contradictions(srv, name, t.Class, src)
		if selfContradicting(byName[name].Annotations) {
			src.Warnings = append(src.Warnings, fmt.Sprintf("%s: tool %q is annotated both readOnlyHint and destructiveHint: true: "+
				"oncerun does not take it as read-only (class external, every call approved, unless the configuration says otherwise)",
				srv.describe(), name))
		}
		if p := sc.Tools[name].Probe; p != nil && opts.Probe && src.KeyClaim == KeyUnverified {
			verified, err := probe(ctx, srv, name, p, opts)
			if err != nil {
				problem(name, err)
				continue
			}
			if verified {
				src.KeyClaim = KeyVerified
			}
		}
		if pr := sc.Tools[name].PairedRead; pr.mapped() {
			// buildTool named the read that stands for the mapping.
			if read := t.PairedRead; len(read) > tools.MaxNameLen {
				problem(name, because(ReasonNameTooLong, fmt.Errorf("%s: tool %q: its mapped paired read would be named %s, %d bytes, past the limit of %d: give the server a shorter name",
					srv.describe(), name, read, len(read), tools.MaxNameLen)))
				continue
			}
			cands = append(cands, candidate{tool: mappedRead(srv, t, pr, t.PairedRead), where: srv.describe(), optional: sc.Optional, pairedOf: t.Name,
				src: Source{Server: sc.Name, Transport: sc.Transport, Tool: pr.Tool, ClassFrom: FromConfig, ApprovalFrom: FromDefault}})
		}
		cands = append(cands, candidate{tool: t, src: src, where: srv.describe(), optional: sc.Optional})
	}
	for _, name := range slices.Sorted(maps.Keys(sc.Tools)) {
		read := sc.Tools[name].PairedRead.Tool
		if class, ok := classOf[read]; ok && read != "" && class != tools.ClassRead {
			problem(name, fmt.Errorf("%s: tool %q: paired_read %q is not a read: the server does not annotate it read-only "+
				"(readOnlyHint, without destructiveHint: true) and the configuration does not class it read (class: read)", srv.describe(), name, read))
			own := ToolName(sc.Name, name)
			cands = slices.DeleteFunc(cands, func(c candidate) bool { return c.tool.Name == own || c.pairedOf == own })
		}
	}
	return cands, errs
}

// mappedReadSuffix ends the name of the read tool that stands for a
// mapped paired read of the tool whose name it follows
// (mem_create_entities_found).
const mappedReadSuffix = "_found"

// build makes the oncerun tool of MCP tool mt, and says where its class
// and approval come from. The configuration is the word of record; where
// it is silent, the tool's annotations decide (readOnlyHint makes a read,
// and a tool that is not read-only needs approval unless destructiveHint
// is false), and without them the specification's defaults do (external,
// destructive).
func build(srv *server, mt *mcpsdk.Tool, oncerunName map[string]string, opts Options) (tools.Tool, Source, error) {
	name := oncerunName[mt.Name]
	tc, listed := srv.cfg.Tools[mt.Name]
	src := Source{Server: srv.cfg.Name, Transport: srv.cfg.Transport, Tool: mt.Name, Unlisted: !listed,
		Idempotent: tc.Idempotent, Hints: hintsOf(mt.Annotations)}
	t, err := buildTool(srv, mt, name, tc, listed, &src, oncerunName, opts)
	return t, src, err
}

func buildTool(srv *server, mt *mcpsdk.Tool, name string, tc ToolConfig, listed bool, src *Source,
	oncerunName map[string]string, opts Options) (tools.Tool, error) {
	if len(name) > tools.MaxNameLen {
		return tools.Tool{}, because(ReasonNameTooLong, fmt.Errorf("its oncerun name %s is %d bytes, the limit is %d: give the server a shorter name, or leave the tool out",
			name, len(name), tools.MaxNameLen))
	}
	desc, err := description(srv.cfg.Name, mt)
	if err != nil {
		return tools.Tool{}, err
	}
	schema, err := json.Marshal(mt.InputSchema)
	if err != nil {
		return tools.Tool{}, fmt.Errorf("input schema: %w", err)
	}
	if len(schema) > MaxSchemaBytes {
		return tools.Tool{}, because(ReasonSchemaTooLarge, fmt.Errorf("its input schema is %d bytes, the limit is %d", len(schema), MaxSchemaBytes))
	}
	var doc map[string]any
	if json.Unmarshal(schema, &doc) != nil || doc["type"] != "object" {
		return tools.Tool{}, fmt.Errorf(`input schema must describe an object ("type": "object"); it is %s`, cut(string(schema), 120))
	}
	t := tools.Tool{
		Name:        name,
		Description: desc,
		Schema:      schema,
		Class:       tools.ClassExternal,
		Retention:   time.Duration(tc.Retention),
		Timeout:     time.Duration(tc.Timeout),
	}
	hints := src.Hints
	switch {
	case tc.Class != "":
		t.Class, src.ClassFrom = tc.Class, FromConfig
	case tc.effectOnly():
		// What the file says of the tool is said of an effect (a paired
		// read, a key the server honours, amounts, edits): a server's
		// readOnlyHint does not make it a read.
		src.ClassFrom = FromConfig
	case hints.ReadOnly && selfContradicting(mt.Annotations):
		// destructiveHint: true says the tool destroys: it is no read,
		// whatever its readOnlyHint says.
		src.ClassFrom = FromAnnotation
	case hints.ReadOnly:
		t.Class, src.ClassFrom = tools.ClassRead, FromAnnotation
	default:
		src.ClassFrom = FromDefault
	}
	switch {
	case !listed && t.Class == tools.ClassRead:
		// An unlisted tool its server marks read-only is a read: it needs
		// no approval, and there is no effect to make once.
		t.Approval, src.ApprovalFrom = tools.Never(), FromAnnotation
	case !listed:
		// An unlisted tool may do anything: a person looks at every call,
		// approves it as proposed, and nothing makes its effect once.
		t.Approval, src.ApprovalFrom = tools.Always(), FromUnlisted
		t.Edits = tools.EditForbidden
	default:
		if t.Approval, err = approvalRule(tc.Approval, doc); err != nil {
			return tools.Tool{}, err
		}
		switch {
		case tc.Approval.Rule != "":
			src.ApprovalFrom = FromConfig
		case t.Class == tools.ClassRead:
			src.ApprovalFrom = FromDefault
		case hints.Destructive:
			// The specification takes a tool to be destructive unless it
			// says otherwise, and an external tool is one with an effect
			// whatever its readOnlyHint says: a person looks first.
			t.Approval, src.ApprovalFrom = tools.Always(), FromDefault
			if mt.Annotations != nil && mt.Annotations.DestructiveHint != nil {
				src.ApprovalFrom = FromAnnotation
			}
		default:
			src.ApprovalFrom = FromAnnotation // destructiveHint: false
		}
		t.Edits, t.Repeatable = editRules[tc.Edits], tc.Repeatable
		for _, a := range tc.Amounts {
			t.Amounts = append(t.Amounts, tools.Amount{Field: a.Field, Currency: a.Currency})
		}
	}
	if tc.PairedRead.Tool != "" {
		t.PairedRead = oncerunName[tc.PairedRead.Tool]
		if tc.PairedRead.mapped() {
			t.PairedRead = name + mappedReadSuffix
		}
	}
	switch {
	case tc.Idempotent:
		t.KeyLifetime = cmp.Or(time.Duration(tc.KeyLifetime), DefaultKeyLifetime)
		src.KeyClaim = KeyUnverified
	case srv.declared.Load() && srv.cfg.IdempotencyKey.Field != FieldNever && t.Class == tools.ClassExternal:
		// A server that declares SEP-3182's capability is trusted for it:
		// it is sent the key in the field it reads.
		t.KeyLifetime = cmp.Or(time.Duration(tc.KeyLifetime), DefaultKeyLifetime)
		src.Idempotent, src.KeyClaim = true, KeyDeclared
	}
	timeout := cmp.Or(t.Timeout, tools.DefaultTimeout)
	task := srv.usesTasks(mt.Name, cmp.Or(tc.Task, TaskAuto))
	if srv.taskSupportOf(mt.Name) == "required" && tc.Task == TaskNever {
		return tools.Tool{}, errors.New("the server requires its calls to run as tasks (execution.taskSupport required), and the configuration says task: never")
	}
	src.TaskSupport, src.Tasks = srv.taskSupportOf(mt.Name), task
	t.Run = srv.runner(mt.Name, t.Class == tools.ClassExternal, timeout, task)
	if live := srv.questionsFor(mt.Name).liveWait(); live > 0 {
		// The step's attempt lasts as long as the call and a person's
		// answer to a live question; the call's own clock stops while a
		// person is asked.
		t.Timeout = timeout + live
	}
	if task {
		// A task is followed for up to task_wait in one attempt; the next
		// attempt follows it on, not sending the call again.
		t.Timeout = cmp.Or(t.Timeout, timeout) + cmp.Or(time.Duration(tc.TaskWait), DefaultTaskWait)
		if t.Class == tools.ClassExternal {
			t.Resume = srv.resumer(mt.Name, timeout)
		}
	}
	// Check the definition as the worker's registry will, now, so that
	// what it refuses is named by server and tool. The paired read is
	// checked by the configuration instead: it is not in this registry of
	// one.
	check := t
	check.PairedRead = ""
	if _, err := tools.NewRegistry(opts.Registry, check); err != nil {
		return tools.Tool{}, fmt.Errorf("the tool registry refuses it: %w", err)
	}
	return t, nil
}

// contradictions names each configured property of a tool that its
// server's annotations contradict.
func contradictions(srv *server, tool string, class tools.Class, src Source) []string {
	h := src.Hints
	if !h.Annotated || src.ClassFrom != FromConfig {
		return nil
	}
	tc := srv.cfg.Tools[tool]
	switch {
	case class == tools.ClassExternal && tc.Class == "" && h.ReadOnly:
		return []string{fmt.Sprintf("%s: tool %q is configured as an effect (paired_read, idempotent, amounts or edits), "+
			"and the server annotates it readOnlyHint: oncerun follows the configuration and keys its calls as effects", srv.describe(), tool)}
	case tc.Class == tools.ClassRead && h.destructive():
		return []string{fmt.Sprintf("%s: tool %q is configured class: read, and the server annotates it destructive "+
			"(readOnlyHint false, destructiveHint true or left out): oncerun follows the configuration, so its calls need no approval "+
			"and are never made once", srv.describe(), tool)}
	case tc.Class == tools.ClassExternal && h.ReadOnly:
		return []string{fmt.Sprintf("%s: tool %q is configured class: external, and the server annotates it readOnlyHint: "+
			"oncerun follows the configuration and keys its calls as effects", srv.describe(), tool)}
	}
	return nil
}

// approvalRule makes the configured rule, checking an "above" rule's field
// against the tool's input schema.
func approvalRule(a Approval, schema map[string]any) (tools.ApprovalRule, error) {
	switch a.Rule {
	case "always":
		return tools.Always(), nil
	case "above":
	default:
		return tools.Never(), nil
	}
	props, _ := schema["properties"].(map[string]any)
	prop, _ := props[a.Field].(map[string]any)
	if typ, _ := prop["type"].(string); typ != "integer" && typ != "number" {
		return tools.ApprovalRule{}, fmt.Errorf("approval: field %q is not a number property of the input schema", a.Field)
	}
	field, above := a.Field, a.Above
	return tools.When(a.String(), func(args json.RawMessage) (bool, error) {
		var m map[string]json.RawMessage
		if err := json.Unmarshal(args, &m); err != nil {
			return false, err
		}
		raw, ok := m[field]
		if !ok || string(raw) == "null" {
			// A call that does not say how much is not known to be small.
			return true, nil
		}
		var v float64
		if err := json.Unmarshal(raw, &v); err != nil {
			return false, fmt.Errorf("%s is not a number", field)
		}
		return v > above, nil
	}), nil
}

// ToolName is the oncerun name of MCP tool tool of server server:
// "<server>_<tool>", lower-cased, with every character other than a letter,
// a digit or an underscore replaced by an underscore.
func ToolName(server, tool string) string {
	var b strings.Builder
	b.WriteString(server)
	b.WriteByte('_')
	for _, r := range strings.ToLower(tool) {
		if (r >= 'a' && r <= 'z') || (r >= '0' && r <= '9') || r == '_' {
			b.WriteRune(r)
		} else {
			b.WriteByte('_')
		}
	}
	return b.String()
}

func offeredNames(offered []*mcpsdk.Tool) string {
	if len(offered) == 0 {
		return "no tools"
	}
	names := make([]string, len(offered))
	for i, t := range offered {
		names[i] = t.Name
	}
	slices.Sort(names)
	return strings.Join(names, ", ")
}

func hasKey[V any](m map[string]V, k string) bool {
	_, ok := m[k]
	return ok
}

func cut(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}
