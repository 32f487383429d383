package tools

import (
	"bytes"
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"math/big"
	"regexp"
	"strconv"
	"slices"
	"strings"
	"time"

	"github.com/santhosh-tekuri/jsonschema/v6"

	"github.com/oncerun/oncerun/internal/keys"
	"github.com/oncerun/oncerun/internal/money"
	"github.com/oncerun/oncerun/internal/schema"
	"github.com/oncerun/oncerun/internal/untrusted"
)

// ErrInvalidTool reports a tool definition the registry refuses.
var ErrInvalidTool = errors.New("invalid tool")

// ErrInvalidCall reports a call that cannot run: an unknown tool, or
// arguments that are malformed or do not match the tool's schema.
var ErrInvalidCall = errors.New("invalid tool call")

// MaxNameLen bounds a tool's name.
const MaxNameLen = 64

var namePattern = regexp.MustCompile(`^[a-z][a-z0-9_]{0,63}$`)

// RegistryConfig holds what the registry checks retention windows against.
type RegistryConfig struct {
	// MaxApprovalPause is the longest a run may wait for an approval.
	// Default DefaultMaxApprovalPause.
	MaxApprovalPause time.Duration
	// RetryHorizon is the longest a tool call may keep being retried after
	// its approval. Default DefaultRetryHorizon.
	RetryHorizon time.Duration
	// Margin is added on top, for clock skew and a watchdog that runs late.
	// Default DefaultWindowMargin.
	Margin time.Duration
}

// Defaults of [RegistryConfig], which runs obey: a run's approval deadline
// is at most DefaultMaxApprovalPause, and a step is retried for at most
// DefaultRetryHorizon.
const (
	DefaultMaxApprovalPause = 14 * 24 * time.Hour
	DefaultRetryHorizon     = time.Hour
	DefaultWindowMargin     = 24 * time.Hour
)

// WithDefaults returns c with zero fields set to their defaults.
func (c RegistryConfig) WithDefaults() RegistryConfig {
	c.MaxApprovalPause = cmp.Or(c.MaxApprovalPause, DefaultMaxApprovalPause)
	c.RetryHorizon = cmp.Or(c.RetryHorizon, DefaultRetryHorizon)
	c.Margin = cmp.Or(c.Margin, DefaultWindowMargin)
	return c
}

// Registry is the validated set of tools a worker serves.
type Registry struct {
	cfg    RegistryConfig
	tools  []*entry // sorted by name
	byName map[string]*entry
}

type entry struct {
	Tool
	schema *jsonschema.Schema
	// signed holds the amount fields whose schema allows values below zero.
	signed map[string]bool
}

// NewRegistry validates tools and returns their registry. It refuses, naming
// the tool, a duplicate or malformed name, an unknown class, a missing or
// invalid schema, a missing Run, a paired read that is not a registered read
// tool, and a keyed or external tool whose retention does not outlast the
// longest approval pause plus the retry horizon.
func NewRegistry(cfg RegistryConfig, tools ...Tool) (*Registry, error) {
	cfg = cfg.WithDefaults()
	r := &Registry{cfg: cfg, byName: make(map[string]*entry, len(tools))}
	var errs []error
	for _, t := range tools {
		e, err := r.compile(t)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if _, dup := r.byName[t.Name]; dup {
			errs = append(errs, fmt.Errorf("tool %s: registered twice: %w", t.Name, ErrInvalidTool))
			continue
		}
		r.byName[t.Name] = e
		r.tools = append(r.tools, e)
	}
	for _, e := range r.tools {
		if e.PairedRead == "" {
			continue
		}
		if p, ok := r.byName[e.PairedRead]; !ok || p.Class != ClassRead {
			errs = append(errs, fmt.Errorf("tool %s: paired read %q is not a registered read tool: %w",
				e.Name, e.PairedRead, ErrInvalidTool))
		}
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	slices.SortFunc(r.tools, func(a, b *entry) int { return strings.Compare(a.Name, b.Name) })
	return r, nil
}

func (r *Registry) compile(t Tool) (*entry, error) {
	invalid := func(format string, args ...any) error {
		return fmt.Errorf("tool %s: %s: %w", cmp.Or(t.Name, "(no name)"), fmt.Sprintf(format, args...), ErrInvalidTool)
	}
	if !namePattern.MatchString(t.Name) {
		return nil, invalid("name must be lower-case letters, digits and underscores, starting with a letter, at most 64 bytes")
	}
	if !t.Class.valid() {
		return nil, invalid("unknown effect class %q (want read, natural, keyed or external)", t.Class)
	}
	if t.Run == nil {
		return nil, invalid("Run is nil")
	}
	if len(bytes.TrimSpace(t.Schema)) == 0 {
		return nil, invalid("no argument schema")
	}
	if t.Approval.kind == approveWhen && t.Approval.predicate == nil {
		return nil, invalid("approval rule %q has no predicate", t.Approval.description)
	}
	if t.Retention < 0 || t.Timeout < 0 {
		return nil, invalid("negative retention or timeout")
	}
	t.Retention = cmp.Or(t.Retention, DefaultRetention)
	t.Timeout = cmp.Or(t.Timeout, DefaultTimeout)
	switch {
	case t.KeyLifetime < 0:
		return nil, invalid("negative key lifetime %s", t.KeyLifetime)
	case t.KeyLifetime > 0 && t.Class != ClassExternal:
		return nil, invalid("a key lifetime is the provider's, for external tools only; this tool is %s", t.Class)
	case t.KeyLifetime > 0 && t.KeyLifetime <= t.Timeout:
		return nil, invalid("key lifetime %s is not longer than one attempt's timeout %s: the provider would forget the key during a call",
			t.KeyLifetime, t.Timeout)
	}
	if t.Class == ClassKeyed || t.Class == ClassExternal {
		need := r.cfg.MaxApprovalPause + r.cfg.RetryHorizon + r.cfg.Margin
		if t.Retention <= need {
			return nil, invalid("retention %s is not longer than the longest approval pause %s plus the retry horizon %s plus a margin of %s: short by %s",
				t.Retention, r.cfg.MaxApprovalPause, r.cfg.RetryHorizon, r.cfg.Margin, need-t.Retention+time.Second)
		}
	}
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(t.Schema))
	if err != nil {
		return nil, invalid("schema is not JSON: %v", err)
	}
	if m, ok := doc.(map[string]any); !ok || m["type"] != "object" {
		return nil, invalid(`schema must describe an object ("type": "object")`)
	}
	signed, err := checkAmounts(&t, doc.(map[string]any))
	if err != nil {
		return nil, invalid("%v", err)
	}
	// A schema loads nothing: an MCP server's "$ref" to a file or an
	// address must not read the worker's files or reach the network.
	s, err := schema.Compile("oncerun:tools/"+t.Name+".json", doc)
	if err != nil {
		return nil, invalid("schema: %v", err)
	}
	return &entry{Tool: t, schema: s, signed: signed}, nil
}

// checkAmounts checks t's edit rule and amount fields against its schema:
// an amount is a top-level integer property, its currency a top-level
// string property, and EditNoIncrease needs an amount to guard. It
// resolves EditDefault, and returns the amounts whose schema allows values
// below zero (a negative minimum or exclusiveMinimum).
func checkAmounts(t *Tool, schema map[string]any) (signed map[string]bool, err error) {
	switch t.Edits {
	case EditDefault:
		t.Edits = EditAllowed
		if len(t.Amounts) > 0 {
			t.Edits = EditNoIncrease
		}
	case EditAllowed, EditForbidden:
	case EditNoIncrease:
		if len(t.Amounts) == 0 {
			return nil, errors.New("edit rule no-increase names no amount field (set Amounts)")
		}
	default:
		return nil, fmt.Errorf("unknown edit rule %d", t.Edits)
	}
	props, _ := schema["properties"].(map[string]any)
	property := func(name string) map[string]any {
		p, _ := props[name].(map[string]any)
		return p
	}
	typeOf := func(name string) string {
		typ, _ := property(name)["type"].(string)
		return typ
	}
	for _, a := range t.Amounts {
		if typeOf(a.Field) != "integer" {
			return nil, fmt.Errorf("amount field %q is not an integer property of the schema", a.Field)
		}
		if a.Currency != "" && typeOf(a.Currency) != "string" {
			return nil, fmt.Errorf("currency field %q of amount %q is not a string property of the schema", a.Currency, a.Field)
		}
		for _, bound := range []string{"minimum", "exclusiveMinimum"} {
			if m, ok := property(a.Field)[bound].(json.Number); ok && below(string(m), 0) {
				if signed == nil {
					signed = map[string]bool{}
				}
				signed[a.Field] = true
			}
		}
	}
	return signed, nil
}

// Lookup returns the tool registered under name, with its defaults applied.
func (r *Registry) Lookup(name string) (Tool, bool) {
	e, ok := r.byName[name]
	if !ok {
		return Tool{}, false
	}
	return e.Tool, true
}

// Names returns the registered tools' names, sorted.
func (r *Registry) Names() []string {
	names := make([]string, len(r.tools))
	for i, e := range r.tools {
		names[i] = e.Name
	}
	return names
}

// Specs describes the tools to a planner, sorted by name.
func (r *Registry) Specs() []Spec {
	specs := make([]Spec, len(r.tools))
	for i, e := range r.tools {
		specs[i] = Spec{Name: e.Name, Description: e.Description, Schema: e.Schema}
	}
	return specs
}

// Config returns the registry's configuration, defaults applied.
func (r *Registry) Config() RegistryConfig { return r.cfg }

// Prepared is a call checked against its tool.
type Prepared struct {
	Tool Tool
	// Args are the arguments in RFC 8785 canonical JSON.
	Args []byte
	// ArgsHash is the SHA-256 of Args, hex encoded.
	ArgsHash string
	// NeedsApproval says the call waits for a human; ApprovalReason says why.
	NeedsApproval  bool
	ApprovalReason string
}

// Prepare checks a call: the tool must be registered and the arguments must
// be a JSON object that canonicalizes, whose strings hold no NUL or other
// control character but tab, newline and carriage return (PostgreSQL cannot
// store a NUL, and a terminal obeys the others), nests at most
// untrusted.MaxJSONDepth deep, and matches the tool's schema. Every
// refusal wraps [ErrInvalidCall] and says what is wrong in words a planner
// can act on.
func (r *Registry) Prepare(call ProposedCall) (Prepared, error) {
	e, ok := r.byName[call.Tool]
	if !ok {
		return Prepared{}, fmt.Errorf("unknown tool %q (known: %s): %w",
			untrusted.Cut(call.Tool, 2*MaxNameLen), strings.Join(r.Names(), ", "), ErrInvalidCall)
	}
	if call.Malformed != "" {
		return Prepared{}, fmt.Errorf("arguments of %s are not valid JSON: %w", call.Tool, ErrInvalidCall)
	}
	raw := call.Args
	if len(bytes.TrimSpace(raw)) == 0 {
		raw = []byte("{}")
	}
	canonical, err := keys.Canonicalize(raw)
	if err != nil {
		return Prepared{}, fmt.Errorf("arguments of %s: %w: %w", call.Tool, err, ErrInvalidCall)
	}
	if err := untrusted.JSON("arguments of "+call.Tool, canonical); err != nil {
		return Prepared{}, fmt.Errorf("%w: %w", err, ErrInvalidCall)
	}
	hash, err := keys.ArgsHash(canonical)
	if err != nil {
		return Prepared{}, fmt.Errorf("arguments of %s: %w: %w", call.Tool, err, ErrInvalidCall)
	}
	inst, err := jsonschema.UnmarshalJSON(bytes.NewReader(canonical))
	if err != nil {
		return Prepared{}, fmt.Errorf("arguments of %s: %w: %w", call.Tool, err, ErrInvalidCall)
	}
	if _, ok := inst.(map[string]any); !ok {
		return Prepared{}, fmt.Errorf("arguments of %s must be a JSON object: %w", call.Tool, ErrInvalidCall)
	}
	if err := e.schema.Validate(inst); err != nil {
		return Prepared{}, fmt.Errorf("arguments of %s do not match its schema: %s: %w",
			call.Tool, schema.Message(err), ErrInvalidCall)
	}
	if err := e.checkAmountValues(canonical); err != nil {
		return Prepared{}, fmt.Errorf("arguments of %s: %w: %w", call.Tool, err, ErrInvalidCall)
	}
	need, why, err := e.Approval.Needs(canonical)
	if err != nil {
		return Prepared{}, fmt.Errorf("approval rule of %s: %w: %w", call.Tool, err, ErrInvalidCall)
	}
	return Prepared{Tool: e.Tool, Args: canonical, ArgsHash: hash, NeedsApproval: need, ApprovalReason: why}, nil
}

// ErrEditRefused reports an edit the tool's [EditRule] does not allow.
var ErrEditRefused = errors.New("edit refused")

// PrepareEdit checks an approver's edit of a call of tool whose proposed
// arguments were original: the tool must allow edits, the edited arguments
// must pass [Registry.Prepare] (a refusal names the field and wraps
// [ErrInvalidCall]), and under EditNoIncrease no amount may grow or change
// currency ([ErrEditRefused]). It returns the edited call, prepared.
func (r *Registry) PrepareEdit(tool string, original, edited []byte) (Prepared, error) {
	e, ok := r.byName[tool]
	if !ok {
		return Prepared{}, fmt.Errorf("unknown tool %q: %w", untrusted.Cut(tool, 2*MaxNameLen), ErrInvalidCall)
	}
	if e.Edits == EditForbidden {
		return Prepared{}, fmt.Errorf("%s does not allow edits: approve or reject the call as proposed: %w", tool, ErrEditRefused)
	}
	p, err := r.Prepare(ProposedCall{Tool: tool, Args: edited})
	if err != nil {
		return Prepared{}, err
	}
	if e.Edits == EditNoIncrease {
		if err := noIncrease(e.Tool, original, p.Args); err != nil {
			return Prepared{}, err
		}
	}
	return p, nil
}

// checkAmountValues refuses an amount below zero that the tool's schema
// does not allow to be (see [Amount]), and an amount whose currency is
// missing or not a currency of ISO 4217's table (money.Lookup): such an
// amount could count against no limit, so the call is not made.
func (e *entry) checkAmountValues(args []byte) error {
	if len(e.Amounts) == 0 {
		return nil
	}
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(args, &fields); err != nil {
		return err
	}
	for _, a := range e.Amounts {
		v, ok := fields[a.Field]
		if !ok {
			continue
		}
		if !e.signed[a.Field] && below(string(v), 0) {
			return fmt.Errorf("%s is %s: an amount is at least 0 (a tool whose amount may be below zero gives it a negative minimum in its schema)",
				a.Field, untrusted.Cut(string(v), 32))
		}
		if err := checkCurrency(a, fields); err != nil {
			return err
		}
	}
	return nil
}

// checkCurrency refuses an amount a of fields whose currency field is
// missing or holds no currency of the table. An amount declared without a
// currency field (points, not money) has none to check.
func checkCurrency(a Amount, fields map[string]json.RawMessage) error {
	if a.Currency == "" {
		return nil
	}
	raw, ok := fields[a.Currency]
	if !ok {
		return fmt.Errorf("%s is missing: amount %s needs the ISO 4217 code of its currency", a.Currency, a.Field)
	}
	var code string
	if err := json.Unmarshal(raw, &code); err != nil {
		return fmt.Errorf("%s is %s: a currency is a string, an ISO 4217 code such as EUR", a.Currency, untrusted.Cut(string(raw), 32))
	}
	if _, ok := money.Lookup(code); !ok {
		return fmt.Errorf("%s is %s: not an ISO 4217 currency code (three letters, such as EUR) that amounts can be counted in",
			a.Currency, untrusted.Cut(strconv.Quote(code), 32))
	}
	return nil
}

// below reports whether the JSON number num is below n; a value that is
// not a number is not.
func below(num string, n int64) bool {
	r, ok := new(big.Rat).SetString(num)
	return ok && r.Cmp(new(big.Rat).SetInt64(n)) < 0
}

// noIncrease refuses an edit that raises one of t's amounts, flips its
// sign, adds one that was not proposed, or changes an amount's currency.
// An amount that may be below zero may not grow in magnitude. Both
// documents have passed Prepare: they are canonical objects, and their
// amounts integers.
func noIncrease(t Tool, original, edited []byte) error {
	var was, now map[string]json.RawMessage
	if err := json.Unmarshal(original, &was); err != nil {
		return fmt.Errorf("proposed arguments of %s: %w", t.Name, err)
	}
	if err := json.Unmarshal(edited, &now); err != nil {
		return fmt.Errorf("edited arguments of %s: %w", t.Name, err)
	}
	for _, a := range t.Amounts {
		before, hadBefore := amount(was[a.Field])
		after, hasAfter := amount(now[a.Field])
		asked := untrusted.Cut(cmp.Or(string(now[a.Field]), "none"), 32)
		switch {
		case !hadBefore && hasAfter:
			return fmt.Errorf("%s may not be added in an edit of %s: none was proposed, %s asked: %w",
				a.Field, t.Name, asked, ErrEditRefused)
		case !hadBefore:
		case !hasAfter:
			return fmt.Errorf("%s may not be left out in an edit of %s: %s was proposed: %w",
				a.Field, t.Name, before, ErrEditRefused)
		case before.Sign() != 0 && after.Sign() != 0 && before.Sign() != after.Sign():
			return fmt.Errorf("%s may not change sign in an edit of %s: %s was proposed, %s asked: %w",
				a.Field, t.Name, before, asked, ErrEditRefused)
		case new(big.Int).Abs(after).Cmp(new(big.Int).Abs(before)) > 0:
			return fmt.Errorf("%s may not increase in an edit of %s: %s was proposed, %s asked: %w",
				a.Field, t.Name, before, asked, ErrEditRefused)
		}
		if a.Currency != "" && string(was[a.Currency]) != string(now[a.Currency]) {
			return fmt.Errorf("%s may not change in an edit of %s: %s was proposed, %s asked: %w",
				a.Currency, t.Name, untrusted.Cut(cmp.Or(string(was[a.Currency]), "none"), 32),
				untrusted.Cut(cmp.Or(string(now[a.Currency]), "none"), 32), ErrEditRefused)
		}
	}
	return nil
}

// amount reads an amount's value: an integer, as the schema requires.
func amount(raw json.RawMessage) (*big.Int, bool) {
	if len(raw) == 0 {
		return nil, false
	}
	r, ok := new(big.Rat).SetString(string(raw))
	if !ok || !r.IsInt() {
		return nil, false
	}
	return r.Num(), true
}
