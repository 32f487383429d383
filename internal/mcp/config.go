package mcp

import (
	"cmp"
	"errors"
	"fmt"
	"io/fs"
	"slices"
	"strconv"
	"time"

	"github.com/go-json-experiment/json"

	"github.com/oncerun/oncerun/internal/configfile"
	"github.com/oncerun/oncerun/internal/untrusted"
	"github.com/oncerun/oncerun/tools"
)

// ConfigEnv names the environment variable that holds the path of the MCP
// configuration file. The worker's main reads it and calls [LoadConfig].
const ConfigEnv = "ONCERUN_MCP_CONFIG"

// Transports a server is reached by.
const (
	// TransportHTTP is MCP's Streamable HTTP transport.
	TransportHTTP = "http"
	// TransportStdio runs the server as a child process and speaks to it
	// over its standard input and output.
	TransportStdio = "stdio"
)

// What becomes of the tools a server offers that its configuration does
// not list ([ServerConfig.Unlisted]).
const (
	// UnlistedRefuse leaves them out. The default.
	UnlistedRefuse = "refuse"
	// UnlistedApprove exposes them as external tools whose every call waits
	// for a person's approval.
	UnlistedApprove = "approve"
)

// DefaultKeyLifetime is how long a server that honours the idempotency key
// is taken to keep keys, unless its tool says otherwise.
const DefaultKeyLifetime = 24 * time.Hour

// Config lists the MCP servers whose tools a worker serves. Read one with
// [LoadConfig]; a Config built in code is checked by [Config.Validate]
// (which [Load] calls).
type Config struct {
	// Servers are the servers, in the order they are connected.
	Servers []ServerConfig `json:"servers"`
}

// ServerConfig is one MCP server.
type ServerConfig struct {
	// Name prefixes the server's tools' names ("<name>_<tool>"): lower-case
	// letters, digits and underscores, starting with a letter. Required.
	Name string `json:"name"`
	// Transport is TransportHTTP or TransportStdio. Required.
	Transport string `json:"transport"`
	// URL is an http server's endpoint, such as https://mcp.example.com/mcp.
	URL string `json:"url,omitempty"`
	// BearerTokenEnv names the environment variable holding the bearer
	// token sent to an http server. Optional.
	BearerTokenEnv string `json:"bearer_token_env,omitempty"`
	// Command is the program a stdio server runs.
	Command string `json:"command,omitempty"`
	// Args are the command's arguments.
	Args []string `json:"args,omitempty"`
	// Env is added to the environment of a stdio server, which otherwise
	// inherits only HOME, LOGNAME, PATH, SHELL, TERM and USER of the
	// worker's (as the reference MCP clients do): none of the worker's
	// secret variables. The worker also keeps its own environment and
	// memory from it on Linux (see docs/mcp.md for what a server running as
	// the worker's user can still read).
	Env map[string]string `json:"env,omitempty"`
	// Optional lets the worker start when the server is down: its tools are
	// left out and Load reports it in [Discovered.Skipped]. A tool of an
	// optional server that cannot be made (a name another MCP tool would
	// have, a description or schema past its bound) is left out too, and
	// Load reports it in [Discovered.LeftOut]. Default false: a server that
	// is down at start, or any tool of it that cannot be made, is an error.
	Optional bool `json:"optional,omitempty"`
	// Unlisted is UnlistedRefuse (the default) or UnlistedApprove.
	Unlisted string `json:"unlisted,omitempty"`
	// IdempotencyKey says where the server's tools/call requests carry the
	// step's key: _meta names, the Idempotency-Key header, SEP-3182's
	// field. Default: _meta io.oncerun/idempotency-key, the header over
	// http, and the field when the server declares tools.idempotency.
	IdempotencyKey KeyConvention `json:"idempotency_key,omitzero"`
	// Questions says who answers the server's questions to a person (MCP
	// elicitation) and how long they wait. Default: any approver or
	// operator of the run's tenant; a question in a call's answer waits
	// as long as an approval, one asked over the live session
	// DefaultLiveWait.
	Questions Questions `json:"questions,omitzero"`
	// Tools maps the MCP name of each tool to expose to what oncerun must
	// know of it.
	Tools map[string]ToolConfig `json:"tools,omitempty"`
}

// DefaultLiveWait is how long a question a server asks over its live
// session, with the call in flight, waits for a person by default, and
// MaxLiveWait the longest it may: the server holds the call open
// meanwhile.
const (
	DefaultLiveWait = 10 * time.Minute
	MaxLiveWait     = time.Hour
)

// Questions says how a server's questions to a person are answered (see
// docs/mcp.md, "Questions to a person").
type Questions struct {
	// AnswerBy names the people who may answer, by the names of their
	// approvals tokens (each an approver or operator of the run's
	// tenant). Default: any approver or operator of the tenant.
	AnswerBy []string `json:"answer_by,omitempty"`
	// Wait is how long a question the server asks in a call's answer (an
	// input-required result) waits for an answer before the step
	// expires. Default: the run's approval deadline; at most
	// tools.DefaultMaxApprovalPause.
	Wait Duration `json:"wait,omitzero"`
	// LiveWait is how long a question the server asks over its live
	// session (elicitation/create, the call in flight) waits before the
	// server is told it was dismissed (cancel). The call's timeout stops
	// while a person is asked, and the step's attempt may last this much
	// longer. Default DefaultLiveWait, at most MaxLiveWait; "0s" declines
	// live questions (oncerun then declares no elicitation to the server).
	LiveWait *Duration `json:"live_wait,omitempty"`
}

// liveWait is how long a live question waits; zero: live questions are
// declined.
func (q Questions) liveWait() time.Duration {
	if q.LiveWait == nil {
		return DefaultLiveWait
	}
	return time.Duration(*q.LiveWait)
}

func (q Questions) problems() []string {
	var out []string
	for i, name := range q.AnswerBy {
		if err := untrusted.Name(fmt.Sprintf("questions.answer_by[%d]", i), name, maxAnswererBytes); err != nil {
			out = append(out, err.Error())
		}
		if slices.Index(q.AnswerBy, name) != i {
			out = append(out, fmt.Sprintf("questions.answer_by[%d]: %q twice", i, name))
		}
	}
	if w := time.Duration(q.Wait); w < 0 || w > tools.DefaultMaxApprovalPause {
		out = append(out, fmt.Sprintf("questions.wait %s: not between 0s and %s", w, tools.DefaultMaxApprovalPause))
	}
	if w := q.liveWait(); w < 0 || w > MaxLiveWait {
		out = append(out, fmt.Sprintf("questions.live_wait %s: not between 0s and %s (a longer wait holds the server's call open: ask in the call's answer instead)", w, MaxLiveWait))
	}
	return out
}

// maxAnswererBytes bounds a name in questions.answer_by, as the approvals
// service bounds a token's name.
const maxAnswererBytes = 128

// ToolConfig is what oncerun must know of an MCP tool that the server
// cannot say: MCP describes a tool's arguments, not its effect.
type ToolConfig struct {
	// Class is "read" or "external". Default "external".
	Class tools.Class `json:"class,omitempty"`
	// Approval decides which calls wait for a person. Default never.
	Approval Approval `json:"approval,omitzero"`
	// Retention is how long the tool's keys are kept. Default
	// tools.DefaultRetention.
	Retention Duration `json:"retention,omitzero"`
	// Timeout bounds one call. Default tools.DefaultTimeout.
	Timeout Duration `json:"timeout,omitzero"`
	// PairedRead is a read tool of the same server that tells whether the
	// call's effect exists: by its name, a read that, called with this
	// tool's arguments (and the step's key in _meta), answers a JSON object
	// whose boolean "found" says so; or a mapping of the call's arguments
	// to the read's and of its answer to found (see [PairedRead]).
	PairedRead PairedRead `json:"paired_read,omitzero"`
	// Idempotent says the server honours the idempotency key: a second call
	// under a key it has seen answers the first call's result and does
	// nothing. Its tool then promises "once".
	Idempotent bool `json:"idempotent,omitempty"`
	// KeyLifetime is how long an idempotent server keeps keys. Default
	// DefaultKeyLifetime; only with Idempotent.
	KeyLifetime Duration `json:"key_lifetime,omitzero"`
	// Edits says what an approver may change in a call before approving
	// it: "allowed", "forbidden" or "no_increase" (no Amounts field may
	// grow, change sign or be added). Default: no_increase when Amounts
	// are named, allowed otherwise.
	Edits string `json:"edits,omitempty"`
	// Amounts names the arguments that are sums of money in minor units,
	// with their currency's argument: the inbox shows them as money,
	// no_increase guards them, and a call with one below zero is refused
	// unless the tool's input schema gives it a negative minimum.
	Amounts []Amount `json:"amounts,omitempty"`
	// Repeatable lets a run make the same call twice on purpose (see
	// tools.Tool.Repeatable).
	Repeatable bool `json:"repeatable,omitempty"`
	// Questions, when set, replaces the server's questions for this
	// tool's calls.
	Questions *Questions `json:"questions,omitempty"`
	// Task says whether the tool's calls run as MCP tasks: TaskAuto (the
	// default: when the server declares task support for tools/call and
	// the tool's execution.taskSupport is optional or required),
	// TaskAlways or TaskNever.
	Task string `json:"task,omitempty"`
	// TaskWait is how long one attempt of a step follows its task before
	// the next attempt follows it on. Default DefaultTaskWait.
	TaskWait Duration `json:"task_wait,omitzero"`
	// Probe checks an idempotent: true claim at start: the tool is called
	// twice under one fresh key with the probe's arguments, and a second
	// answer unlike the first (a second effect) stops the start. A probe
	// makes a real effect, once when the claim holds: give it arguments
	// whose effect is harmless. Without it the claim is shown unverified.
	Probe *Probe `json:"probe,omitempty"`
}

// Probe is the call that checks a tool's idempotency claim.
type Probe struct {
	// Args are the probe call's arguments, a JSON object.
	Args map[string]any `json:"args"`
}

// effectOnly reports whether the configuration says of the tool what only
// an effect has: a paired read, a key its server honours (or a probe of
// that), amounts, an edit rule.
func (t ToolConfig) effectOnly() bool {
	return !t.PairedRead.IsZero() || t.Idempotent || t.KeyLifetime != 0 || t.Probe != nil || len(t.Amounts) > 0 || t.Edits != ""
}

// Amount is an argument that is a sum of money, in minor units, and the
// argument holding its ISO 4217 currency code.
type Amount struct {
	Field    string `json:"field"`
	Currency string `json:"currency,omitempty"`
}

// editRules maps the configuration's spelling of an edit rule to the rule.
var editRules = map[string]tools.EditRule{
	"": tools.EditDefault, "allowed": tools.EditAllowed, "forbidden": tools.EditForbidden, "no_increase": tools.EditNoIncrease,
}

// Approval is a tool's approval rule as the configuration spells it: the
// string "never" or "always", or an object {"field": "amount_cents",
// "above": 10000} asking for approval when that top-level argument is above
// the number (or is missing: a call without it is not known to be small).
type Approval struct {
	// Rule is "never", "always" or "above". Empty means the file does not
	// say: the tool's class and annotations decide (an external tool waits
	// for a person unless its server says destructiveHint: false).
	Rule string
	// Field and Above are the argument and the threshold of rule "above".
	Field string
	Above float64
}

// UnmarshalJSON reads a string or a {"field", "above"} object.
func (a *Approval) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err == nil {
		if s != "never" && s != "always" {
			return fmt.Errorf(`approval %q: want "never", "always" or {"field": ..., "above": ...}`, s)
		}
		*a = Approval{Rule: s}
		return nil
	}
	var o struct {
		Field string   `json:"field"`
		Above *float64 `json:"above"`
	}
	if err := json.Unmarshal(b, &o, json.RejectUnknownMembers(true)); err != nil {
		return fmt.Errorf(`approval: want "never", "always" or {"field": ..., "above": ...}: %w`, err)
	}
	if o.Field == "" || o.Above == nil {
		return errors.New(`approval: an object rule needs both "field" and "above"`)
	}
	*a = Approval{Rule: "above", Field: o.Field, Above: *o.Above}
	return nil
}

// MarshalJSON writes the rule as it is read.
func (a Approval) MarshalJSON() ([]byte, error) {
	if a.Rule == "above" {
		return json.Marshal(map[string]any{"field": a.Field, "above": a.Above})
	}
	return json.Marshal(cmp.Or(a.Rule, "never"))
}

// IsZero reports the default rule, never.
func (a Approval) IsZero() bool { return a.Rule == "" || a.Rule == "never" }

// String describes the rule for approvers.
func (a Approval) String() string {
	if a.Rule == "above" {
		return a.Field + " above " + strconv.FormatFloat(a.Above, 'f', -1, 64)
	}
	return cmp.Or(a.Rule, "never")
}

// Duration is a time.Duration spelled as Go spells it: "90s", "720h".
type Duration time.Duration

// UnmarshalJSON reads a duration string.
func (d *Duration) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return fmt.Errorf(`want a duration string such as "90s" or "720h", got %s`, b)
	}
	v, err := time.ParseDuration(s)
	if err != nil {
		return fmt.Errorf(`duration %q: want a Go duration such as "90s" or "720h" (there is no "d" unit)`, s)
	}
	*d = Duration(v)
	return nil
}

// MarshalJSON writes the duration string.
func (d Duration) MarshalJSON() ([]byte, error) { return json.Marshal(time.Duration(d).String()) }

// LoadConfig reads the configuration file at path: JSON when its name ends
// in .json, YAML when in .yaml or .yml. Decoding is strict (an unknown or
// repeated field is refused, with its path in the file), and the result is
// validated.
func LoadConfig(path string) (Config, error) {
	raw, format, err := configfile.Read(path)
	if pe := (*fs.PathError)(nil); errors.As(err, &pe) {
		return Config{}, fmt.Errorf("mcp config: %w", err)
	}
	if err != nil {
		return Config{}, fmt.Errorf("mcp config %s: %w", path, err)
	}
	cfg, err := ParseConfig(raw, format)
	if err != nil {
		return Config{}, fmt.Errorf("mcp config %s: %w", path, err)
	}
	return cfg, nil
}

// ParseConfig decodes a configuration in format "json" or "yaml", strictly,
// and validates it.
func ParseConfig(raw []byte, format string) (Config, error) {
	var cfg Config
	if err := configfile.Decode(raw, format, &cfg); err != nil {
		return Config{}, err
	}
	if err := cfg.Validate(); err != nil {
		return Config{}, err
	}
	return cfg, nil
}
