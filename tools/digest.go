package tools

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"

	"github.com/oncerun/oncerun/internal/keys"
)

// shortDigest is how many hex characters of a digest [Digest.Short] keeps.
const shortDigest = 12

// Digest is the fingerprint of what a registry offers: a SHA-256, in
// lower-case hex, of every tool's definition, and of each tool's own. Two
// workers whose registries have one digest offer the same tools under the
// same rules; a worker's digest is part of its version (its log line at
// start, its /metrics, its Temporal identity, its default build ID).
type Digest struct {
	// Registry is the digest of the whole registry: the SHA-256 of the
	// RFC 8785 canonical JSON array of the tools' definitions, sorted by
	// name.
	Registry string
	// Tools is each tool's own digest, by name: the SHA-256 of its
	// definition's canonical JSON, so that two registries can be compared
	// tool by tool.
	Tools map[string]string
}

// Short is the first 12 hex characters of the registry's digest, as logs,
// metrics and worker identities carry it.
func (d Digest) Short() string {
	if len(d.Registry) < shortDigest {
		return d.Registry
	}
	return d.Registry[:shortDigest]
}

// definition is what a tool's digest covers: everything that decides how a
// call of it is checked, approved, keyed and run, but its Run and its
// description's wording.
type definition struct {
	Name  string `json:"name"`
	Class Class  `json:"class"`
	// Schema is the argument schema in canonical JSON; SchemaSHA256 the
	// SHA-256 of the schema as written, for one that has no canonical form
	// (an integer beyond 2⁵³ with no exact double, more than 1 MiB).
	Schema       json.RawMessage `json:"schema,omitempty"`
	SchemaSHA256 string          `json:"schema_sha256,omitempty"`
	Approval     string          `json:"approval"`
	Edits        string          `json:"edits"`
	Amounts      []amountDef     `json:"amounts"`
	PairedRead   string          `json:"paired_read"`
	KeyLifetime  string          `json:"key_lifetime"`
	Repeatable   bool            `json:"repeatable"`
	OncePerRun   bool            `json:"once_per_run"`
	InDatabase   bool            `json:"in_database"`
	Local        bool            `json:"local"`
	Guarantee    string          `json:"guarantee"`
	Timeout      string          `json:"timeout"`
	Retention    string          `json:"retention"`
	// More is what the registry does not know of the tool and its caller
	// does: an MCP tool's server, a sub-agent's grant.
	More any `json:"more,omitempty"`
}

type amountDef struct {
	Field    string `json:"field"`
	Currency string `json:"currency"`
}

// Digest computes the registry's [Digest]. more, when not nil, is called
// with each tool's name and returns what the registry does not know of
// that tool but its worker does (an MCP tool's server, transport and
// annotations; a sub-agent's grant, planner and limits), as a value that
// encodes as JSON, or nil for nothing. Each tool's definition covers its
// name, class, schema (canonical JSON), approval rule, edit rule, amounts,
// paired read, key lifetime, Repeatable and once-per-run, InDatabase and
// local, guarantee, timeout, retention and more's value; not its Run nor
// its description. The order in which tools were registered does not
// matter.
func (r *Registry) Digest(more func(tool string) any) (Digest, error) {
	d := Digest{Tools: make(map[string]string, len(r.tools))}
	all := sha256.New()
	all.Write([]byte("["))
	for i, e := range r.tools { // sorted by name
		def, err := e.definition(more)
		if err != nil {
			return Digest{}, err
		}
		sum := sha256.Sum256(def)
		d.Tools[e.Name] = hex.EncodeToString(sum[:])
		if i > 0 {
			all.Write([]byte(","))
		}
		// The array of canonical documents is itself canonical.
		all.Write(def)
	}
	all.Write([]byte("]"))
	d.Registry = hex.EncodeToString(all.Sum(nil))
	return d, nil
}

// definition is e's definition in canonical JSON.
func (e *entry) definition(more func(string) any) ([]byte, error) {
	t := e.Tool
	def := definition{
		Name: t.Name, Class: t.Class, Approval: t.Approval.String(), Edits: t.Edits.String(), Amounts: []amountDef{},
		PairedRead: t.PairedRead, KeyLifetime: t.KeyLifetime.String(), Repeatable: t.Repeatable, OncePerRun: t.OncePerRun(),
		InDatabase: t.InDatabase, Local: t.Local(), Guarantee: t.Guarantee(), Timeout: t.Timeout.String(), Retention: t.Retention.String(),
	}
	for _, a := range t.Amounts {
		def.Amounts = append(def.Amounts, amountDef(a))
	}
	if s, err := keys.Canonicalize(t.Schema); err == nil {
		def.Schema = s
	} else {
		sum := sha256.Sum256(t.Schema)
		def.SchemaSHA256 = hex.EncodeToString(sum[:])
	}
	if more != nil {
		def.More = more(t.Name)
	}
	raw, err := json.Marshal(def)
	if err != nil {
		return nil, fmt.Errorf("tool %s: encode its definition: %w", t.Name, err)
	}
	c, err := keys.Canonicalize(raw)
	if err != nil {
		return nil, fmt.Errorf("tool %s: canonical form of its definition: %w", t.Name, err)
	}
	return c, nil
}
