package keys

import (
	"errors"
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"
)

// Version is the prefix of every key this package derives. A future change to
// the key layout takes a new prefix, so keys of both layouts can coexist in
// the store without colliding.
const Version = "v1"

// Limits on the unescaped length in bytes of each part of a key. Escaping can
// triple a part's length; the limits keep the longest key well under the size
// a PostgreSQL B-tree index entry may take.
const (
	MaxTenantLen = 64
	MaxRunIDLen  = 256
	MaxToolLen   = 64
)

// ErrInvalidKey is returned, wrapped, for a key part that is empty, too long,
// not valid UTF-8 or holds a control character, and for a key string that
// [Parse] cannot read back.
var ErrInvalidKey = errors.New("invalid idempotency key")

// Key identifies one tool call: the step-th call of run RunID of tenant
// Tenant, made to tool Tool. Build one with [New], which validates the parts;
// a Key literal that was not validated is rejected by the store.
type Key struct {
	Tenant string
	RunID  string
	Step   int64
	Tool   string
}

// New returns the key of step step of run runID of tenant tenant calling tool.
// Steps are numbered from 1.
func New(tenant, runID string, step int64, tool string) (Key, error) {
	k := Key{Tenant: tenant, RunID: runID, Step: step, Tool: tool}
	if err := k.Validate(); err != nil {
		return Key{}, err
	}
	return k, nil
}

// Validate reports, naming the part, why k cannot be used as a key.
func (k Key) Validate() error {
	if err := validatePart("tenant", k.Tenant, MaxTenantLen); err != nil {
		return err
	}
	if err := validatePart("run id", k.RunID, MaxRunIDLen); err != nil {
		return err
	}
	if k.Step < 1 {
		return fmt.Errorf("%w: step is %d, steps are numbered from 1", ErrInvalidKey, k.Step)
	}
	return validatePart("tool", k.Tool, MaxToolLen)
}

func validatePart(name, v string, maxLen int) error {
	switch {
	case v == "":
		return fmt.Errorf("%w: %s is empty", ErrInvalidKey, name)
	case len(v) > maxLen:
		return fmt.Errorf("%w: %s is %d bytes, the limit is %d", ErrInvalidKey, name, len(v), maxLen)
	case !utf8.ValidString(v):
		return fmt.Errorf("%w: %s is not valid UTF-8", ErrInvalidKey, name)
	case strings.IndexFunc(v, unicode.IsControl) >= 0:
		return fmt.Errorf("%w: %s %q holds a control character", ErrInvalidKey, name, v)
	}
	return nil
}

// String returns the key's string form, v1/<tenant>/<run id>/<step>/<tool>,
// with each part percent-escaped as a URL path segment ("/" becomes "%2F",
// "%" becomes "%25").
func (k Key) String() string {
	var b strings.Builder
	b.Grow(len(Version) + len(k.Tenant) + len(k.RunID) + len(k.Tool) + 24)
	b.WriteString(Version)
	b.WriteByte('/')
	b.WriteString(url.PathEscape(k.Tenant))
	b.WriteByte('/')
	b.WriteString(url.PathEscape(k.RunID))
	b.WriteByte('/')
	b.WriteString(strconv.FormatInt(k.Step, 10))
	b.WriteByte('/')
	b.WriteString(url.PathEscape(k.Tool))
	return b.String()
}

// Parse reads a key string back into its parts. It accepts exactly the
// strings [Key.String] produces for valid keys, so Parse(k.String()) == k and
// no two distinct strings parse to the same key.
func Parse(s string) (Key, error) {
	fields := strings.Split(s, "/")
	if len(fields) != 5 {
		return Key{}, fmt.Errorf("%w: %q has %d /-separated fields, want 5", ErrInvalidKey, s, len(fields))
	}
	if fields[0] != Version {
		return Key{}, fmt.Errorf("%w: %q does not start with %s/", ErrInvalidKey, s, Version)
	}
	var k Key
	var err error
	if k.Tenant, err = unescapePart("tenant", fields[1]); err != nil {
		return Key{}, err
	}
	if k.RunID, err = unescapePart("run id", fields[2]); err != nil {
		return Key{}, err
	}
	if k.Step, err = strconv.ParseInt(fields[3], 10, 64); err != nil || strconv.FormatInt(k.Step, 10) != fields[3] {
		return Key{}, fmt.Errorf("%w: step %q is not a decimal number in canonical form", ErrInvalidKey, fields[3])
	}
	if k.Tool, err = unescapePart("tool", fields[4]); err != nil {
		return Key{}, err
	}
	if err := k.Validate(); err != nil {
		return Key{}, err
	}
	return k, nil
}

// unescapePart undoes url.PathEscape and refuses any spelling other than the
// one PathEscape produces (such as %2f for %2F, or %41 for A), so that
// distinct strings never parse to equal keys.
func unescapePart(name, field string) (string, error) {
	v, err := url.PathUnescape(field)
	if err != nil {
		return "", fmt.Errorf("%w: %s %q: %w", ErrInvalidKey, name, field, err)
	}
	if url.PathEscape(v) != field {
		return "", fmt.Errorf("%w: %s %q is not escaped canonically", ErrInvalidKey, name, field)
	}
	return v, nil
}

// WorkflowID is the Temporal workflow ID of a tenant's run: the same tenant
// and run id always name the same workflow, and escaping keeps two pairs
// from sharing one.
func WorkflowID(tenant, runID string) string {
	return "oncerun/" + url.PathEscape(tenant) + "/" + url.PathEscape(runID)
}

// ParseWorkflowID returns the tenant and run id of a run's workflow id, as
// WorkflowID made it; ok is false for any other id.
func ParseWorkflowID(id string) (tenant, runID string, ok bool) {
	rest, found := strings.CutPrefix(id, "oncerun/")
	t, r, two := strings.Cut(rest, "/")
	if !found || !two {
		return "", "", false
	}
	tenant, err := url.PathUnescape(t)
	if err != nil {
		return "", "", false
	}
	if runID, err = url.PathUnescape(r); err != nil || tenant == "" || runID == "" {
		return "", "", false
	}
	return tenant, runID, true
}

// FollowOn returns the key under which follow-on message seq of step k's
// effect is delivered by tool: k's tenant, run and step, and the tool part
// "<tool>.<seq>". Tool names hold no dot, so it never equals a step's key.
func FollowOn(k Key, seq int, tool string) (Key, error) {
	if seq < 1 {
		return Key{}, fmt.Errorf("%w: follow-on message %d: messages are numbered from 1", ErrInvalidKey, seq)
	}
	return New(k.Tenant, k.RunID, k.Step, tool+"."+strconv.Itoa(seq))
}
