package mcp

import (
	"cmp"
	"errors"
	"fmt"
	"maps"
	"net/url"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/oncerun/oncerun/internal/untrusted"
	"github.com/oncerun/oncerun/tools"
)

var (
	serverNamePattern = regexp.MustCompile(`^[a-z][a-z0-9_]{0,30}$`)
	envNamePattern    = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)
)

// Validate checks the configuration and reports every problem, each naming
// the server, the tool and the field.
func (c Config) Validate() error {
	if len(c.Servers) == 0 {
		return errors.New("servers: no server is configured")
	}
	var errs []error
	seen := make(map[string]int, len(c.Servers))
	for i, s := range c.Servers {
		where := fmt.Sprintf("servers[%d]", i)
		if s.Name != "" {
			where = "server " + s.Name
		}
		if j, dup := seen[s.Name]; dup && s.Name != "" {
			errs = append(errs, fmt.Errorf("%s: name: also the name of servers[%d]", where, j))
		}
		seen[s.Name] = i
		for _, err := range s.validate() {
			errs = append(errs, fmt.Errorf("%s: %w", where, err))
		}
	}
	return errors.Join(errs...)
}

func (s ServerConfig) validate() []error {
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	if !serverNamePattern.MatchString(s.Name) {
		bad("name %q: want lower-case letters, digits and underscores, starting with a letter, at most 31 bytes (it prefixes the tools' names)", s.Name)
	}
	switch s.Transport {
	case TransportHTTP:
		u, err := url.Parse(s.URL)
		if s.URL == "" || err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			bad("url %q: an http server needs an http or https URL", untrusted.Redact(s.URL))
		}
		if s.BearerTokenEnv != "" && !envNamePattern.MatchString(s.BearerTokenEnv) {
			bad("bearer_token_env %q: not an environment variable name", s.BearerTokenEnv)
		}
		if s.Command != "" || len(s.Args) > 0 || len(s.Env) > 0 {
			bad("command, args and env are for stdio servers; this one is http")
		}
	case TransportStdio:
		if s.Command == "" {
			bad("command: a stdio server needs the program to run")
		}
		for k := range s.Env {
			if !envNamePattern.MatchString(k) {
				bad("env: %q is not an environment variable name", k)
			}
		}
		if s.URL != "" || s.BearerTokenEnv != "" {
			bad("url and bearer_token_env are for http servers; this one is stdio")
		}
	default:
		bad("transport %q: want %q or %q", s.Transport, TransportHTTP, TransportStdio)
	}
	for _, problem := range s.IdempotencyKey.problems(s.Transport) {
		bad("%s", problem)
	}
	for _, problem := range s.Questions.problems() {
		bad("%s", problem)
	}
	switch s.Unlisted {
	case "", UnlistedRefuse, UnlistedApprove:
	default:
		bad("unlisted %q: want %q or %q", s.Unlisted, UnlistedRefuse, UnlistedApprove)
	}
	if len(s.Tools) == 0 && s.Unlisted != UnlistedApprove {
		bad("tools: no tool is listed and unlisted tools are refused: the server would add nothing")
	}
	for _, name := range slices.Sorted(maps.Keys(s.Tools)) {
		for _, err := range s.validateTool(name, s.Tools[name]) {
			errs = append(errs, fmt.Errorf("tool %q: %w", name, err))
		}
	}
	return errs
}

func (s ServerConfig) validateTool(name string, t ToolConfig) []error {
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	if strings.TrimSpace(name) == "" {
		bad("the tool's name is empty")
	}
	class := cmp.Or(t.Class, tools.ClassExternal)
	switch class {
	case tools.ClassRead, tools.ClassExternal:
	case tools.ClassNatural, tools.ClassKeyed:
		bad("class %q: an MCP tool's effect happens outside our database: want read or external", t.Class)
	default:
		bad("class %q: want read or external", t.Class)
	}
	switch t.Approval.Rule {
	case "", "never", "always":
	case "above":
		if t.Approval.Field == "" {
			bad("approval: field is empty")
		}
	default:
		bad("approval %q: want never, always or {field, above}", t.Approval.Rule)
	}
	for field, d := range map[string]Duration{"retention": t.Retention, "timeout": t.Timeout, "key_lifetime": t.KeyLifetime} {
		if d < 0 {
			bad("%s %s: negative", field, time.Duration(d))
		}
	}
	if class == tools.ClassRead && (t.Idempotent || !t.PairedRead.IsZero() || t.KeyLifetime != 0) {
		bad("idempotent, key_lifetime and paired_read are for external tools; this one is read")
	}
	if _, ok := editRules[t.Edits]; !ok {
		bad("edits %q: want allowed, forbidden or no_increase", t.Edits)
	}
	if t.Edits == "no_increase" && len(t.Amounts) == 0 {
		bad("edits no_increase: name the amounts that may not grow (amounts: [{field, currency}])")
	}
	if t.Questions != nil {
		for _, problem := range t.Questions.problems() {
			bad("%s", problem)
		}
	}
	switch t.Task {
	case "", TaskAuto, TaskAlways, TaskNever:
	default:
		bad("task %q: want %s, %s or %s", t.Task, TaskAuto, TaskAlways, TaskNever)
	}
	if t.TaskWait < 0 {
		bad("task_wait %s: negative", time.Duration(t.TaskWait))
	}
	if t.Probe != nil && t.Task == TaskAlways {
		bad("probe: a tool whose calls run as tasks is not probed")
	}
	if t.Probe != nil && !t.Idempotent {
		bad("probe: checks an idempotent: true claim; this tool makes none")
	}
	if t.Probe != nil && t.Probe.Args == nil {
		bad("probe: args: the probe call's arguments are required")
	}
	if t.KeyLifetime != 0 && !t.Idempotent {
		bad("key_lifetime: set only for a tool whose server honours the key (idempotent: true)")
	}
	if pr := t.PairedRead; !pr.IsZero() {
		p := pr.Tool
		pt, listed := s.Tools[p]
		for _, problem := range pr.problems() {
			bad("%s", problem)
		}
		switch {
		case p == "":
			bad("paired_read: name its tool (tool: ...)")
		case p == name:
			bad("paired_read: a tool cannot be its own paired read")
		case !listed:
			bad("paired_read %q: not a tool listed for this server", p)
		case pt.Class == tools.ClassExternal:
			// A paired read the configuration does not class may be a read
			// by its server's annotation: Load checks it once it knows.
			bad("paired_read %q: its class is %s, a paired read must be read", p, pt.Class)
		}
	}
	return errs
}
