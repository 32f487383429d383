package approvals

import (
	"bytes"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/oncerun/oncerun/internal/keys"
	"github.com/oncerun/oncerun/internal/untrusted"
	"github.com/oncerun/oncerun/workflows"
)

// Role is what a token may do.
type Role string

// Roles, from least to most allowed.
const (
	// RoleViewer may read runs and approvals.
	RoleViewer Role = "viewer"
	// RoleApprover may also approve and reject steps.
	RoleApprover Role = "approver"
	// RoleOperator may also start runs.
	RoleOperator Role = "operator"
)

// CanDecide reports whether the role may approve or reject a step.
func (r Role) CanDecide() bool { return r == RoleApprover || r == RoleOperator }

// CanStart reports whether the role may start runs.
func (r Role) CanStart() bool { return r == RoleOperator }

func (r Role) valid() bool { return r == RoleViewer || r == RoleApprover || r == RoleOperator }

// Identity is who a token belongs to.
type Identity struct {
	Name   string `json:"name"`
	Tenant string `json:"tenant"`
	Role   Role   `json:"role"`
}

// TokenEntry is one entry of a tokens file: the SHA-256 of a token, in hex,
// and whose it is. The token itself is never stored.
type TokenEntry struct {
	TokenSHA256 string `json:"token_sha256"`
	Name        string `json:"name"`
	Tenant      string `json:"tenant"`
	Role        Role   `json:"role"`
}

// TokenPrefix starts every token [NewToken] makes, so that a leaked token is
// easy to recognise in logs and by secret scanners.
const TokenPrefix = "oncerun_"

// NewToken makes a fresh random token and the tokens-file entry that grants
// it to id.
func NewToken(id Identity) (string, TokenEntry, error) {
	if err := id.validate(); err != nil {
		return "", TokenEntry{}, err
	}
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		return "", TokenEntry{}, fmt.Errorf("make token: %w", err)
	}
	token := TokenPrefix + base64.RawURLEncoding.EncodeToString(b)
	return token, TokenEntry{TokenSHA256: TokenSHA256(token), Name: id.Name, Tenant: id.Tenant, Role: id.Role}, nil
}

// TokenSHA256 is the hex SHA-256 of a token, as a tokens file lists it.
func TokenSHA256(token string) string {
	sum := sha256.Sum256([]byte(token))
	return hex.EncodeToString(sum[:])
}

// validate checks an identity: its name and tenant are names people read
// (untrusted.Name), as they are recorded with every decision.
func (id Identity) validate() error {
	if err := untrusted.Name("name", id.Name, workflows.MaxApproverBytes); err != nil {
		return err
	}
	if err := untrusted.Name("tenant", id.Tenant, keys.MaxTenantLen); err != nil {
		return err
	}
	if !id.Role.valid() {
		return fmt.Errorf("role %q is not viewer, approver or operator", id.Role)
	}
	return nil
}

// Tokens is a checked set of tokens.
type Tokens struct {
	entries []token
}

type token struct {
	sum [sha256.Size]byte
	id  Identity
}

// ParseTokens reads a tokens file: a JSON array of [TokenEntry]. Every entry
// is checked; an error names the entry and what is wrong with it. Field
// names are matched exactly.
func ParseTokens(data []byte) (*Tokens, error) {
	const shape = `a JSON array of {"token_sha256", "name", "tenant", "role"}`
	dec := json.NewDecoder(bytes.NewReader(data))
	var raws []json.RawMessage
	if err := dec.Decode(&raws); err != nil {
		return nil, fmt.Errorf("tokens file is not %s: %w", shape, err)
	}
	if raws == nil {
		return nil, fmt.Errorf("tokens file is not %s", shape)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return nil, errors.New("tokens file: unexpected data after the array")
	}
	t := &Tokens{}
	seen := map[string]int{}
	for i, raw := range raws {
		n := i + 1
		e, err := parseEntry(raw)
		if err != nil {
			return nil, fmt.Errorf("tokens file entry %d: %w", n, err)
		}
		sum, err := hex.DecodeString(e.TokenSHA256)
		if err != nil || len(sum) != sha256.Size {
			return nil, fmt.Errorf("tokens file entry %d (%q): token_sha256 must be 64 hex digits, the SHA-256 of the token", n, e.Name)
		}
		id := Identity{Name: e.Name, Tenant: e.Tenant, Role: e.Role}
		if err := id.validate(); err != nil {
			return nil, fmt.Errorf("tokens file entry %d: %w", n, err)
		}
		if first, dup := seen[string(sum)]; dup {
			return nil, fmt.Errorf("tokens file entry %d (%q) has the same token_sha256 as entry %d", n, e.Name, first)
		}
		seen[string(sum)] = n
		var tok token
		copy(tok.sum[:], sum)
		tok.id = id
		t.entries = append(t.entries, tok)
	}
	return t, nil
}

// parseEntry decodes one entry: an object of the known fields, spelled
// exactly, none twice; the fields' values are checked by the caller.
func parseEntry(raw json.RawMessage) (TokenEntry, error) {
	var e TokenEntry
	if len(raw) == 0 || raw[0] != '{' {
		return TokenEntry{}, errors.New(`not an object {"token_sha256", "name", "tenant", "role"}`)
	}
	if err := untrusted.Decode(raw, &e); err != nil {
		return TokenEntry{}, fmt.Errorf("%w (known fields: token_sha256, name, tenant, role)", err)
	}
	return e, nil
}

// Len is the number of tokens.
func (t *Tokens) Len() int { return len(t.entries) }

// Lookup finds the identity a token belongs to. It compares the token's
// SHA-256 with every entry in constant time, so how long it takes tells
// nothing about which entries exist.
func (t *Tokens) Lookup(tok string) (Identity, bool) {
	sum := sha256.Sum256([]byte(tok))
	var found Identity
	ok := 0
	for _, e := range t.entries {
		match := subtle.ConstantTimeCompare(sum[:], e.sum[:])
		if match == 1 {
			found = e.id
		}
		ok |= match
	}
	return found, ok == 1
}

// TokenSource finds the identity of a presented token.
type TokenSource interface {
	Lookup(token string) (Identity, bool)
}

// TokenFile is a tokens file that is read again when it changes, so that a
// token can be added or revoked without a restart. The file is read at most
// once a second and compared by content, so no change is missed whatever the
// file system's timestamps. A change that does not parse is logged once and
// the tokens read before stay in force.
type TokenFile struct {
	path  string
	cfg   TokenFileConfig
	log   *zap.Logger
	every time.Duration

	mu      sync.Mutex
	tokens  *Tokens
	sum     [sha256.Size]byte
	checked time.Time
	// lastErr is the last read error logged, so that a file that stays
	// unreadable is logged once; mode is the file's mode as last checked,
	// so that a warning about it is logged once per change.
	lastErr string
	mode    os.FileMode
}

// TokenFileConfig configures [OpenTokenFile].
type TokenFileConfig struct {
	// Log receives reloads, refusals and warnings. Default: none.
	Log *zap.Logger
	// AllowWritable loads a file that users other than this process's user
	// or root may write, by its mode or its owner. By default such a file
	// is refused: whoever can write it can grant themselves any role
	// (APPROVALS_TOKENS_FILE_INSECURE=true sets it).
	AllowWritable bool
}

// OpenTokenFile reads the tokens file at path. It is an error if the file
// is missing or does not parse, or if users other than this process's user
// or root may write it (unless cfg.AllowWritable). A file other users may read is loaded with
// a warning: it holds the tokens' hashes, not the tokens, but it says who
// may do what.
func OpenTokenFile(path string, cfg TokenFileConfig) (*TokenFile, error) {
	log := cfg.Log
	if log == nil {
		log = zap.NewNop()
	}
	f := &TokenFile{path: path, cfg: cfg, log: log, every: time.Second}
	data, refused, err := f.read()
	switch {
	case err != nil:
		return nil, fmt.Errorf("tokens file: %w", err)
	case refused != nil:
		return nil, refused
	}
	t, err := ParseTokens(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	f.tokens, f.sum = t, sha256.Sum256(data)
	return f, nil
}

// read opens the tokens file, checks the file it opened and reads it, so
// that what is checked is what is read. refused says why the file may not
// be used; err is an error reading it.
func (f *TokenFile) read() (data []byte, refused, err error) {
	fh, err := os.Open(f.path)
	if err != nil {
		return nil, nil, err
	}
	defer fh.Close()
	info, err := fh.Stat()
	if err != nil {
		return nil, nil, err
	}
	if refused := f.check(info); refused != nil {
		return nil, refused, nil
	}
	data, err = io.ReadAll(fh)
	return data, nil, err
}

// check refuses a file that someone other than this process's user or
// root may write (a group or others by its mode, or its owner) and warns,
// once per change of mode, about one others may read.
func (f *TokenFile) check(info os.FileInfo) error {
	mode := info.Mode().Perm()
	changed := mode != f.mode
	f.mode = mode
	var problem string
	if mode&0o022 != 0 {
		problem = fmt.Sprintf("is writable by users other than its owner (mode %04o)", mode)
	} else if uid, ok := fileOwner(info); ok && uid != 0 && uid != os.Geteuid() {
		problem = fmt.Sprintf("is owned by uid %d, neither this process's user (uid %d) nor root", uid, os.Geteuid())
	}
	if problem != "" {
		msg := fmt.Sprintf("tokens file %s %s: whoever can write it can grant themselves any role; "+
			"make it this user's or root's and run chmod go-w on it, or set APPROVALS_TOKENS_FILE_INSECURE=true", f.path, problem)
		if !f.cfg.AllowWritable {
			return errors.New(msg)
		}
		if changed {
			f.log.Warn(msg + " (it is set: loading the file anyway)")
		}
		return nil
	}
	if mode&0o044 != 0 && changed {
		f.log.Warn("tokens file is readable by other users; it holds hashes, not tokens, but chmod 600 keeps who may do what private",
			zap.String("path", f.path), zap.String("mode", fmt.Sprintf("%04o", mode)))
	}
	return nil
}

// Len is the number of tokens in force.
func (f *TokenFile) Len() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.tokens.Len()
}

// Lookup finds the identity of a token, reading the file again first if it
// changed (looked at no more than once a second).
func (f *TokenFile) Lookup(tok string) (Identity, bool) {
	f.mu.Lock()
	now := time.Now()
	if now.Sub(f.checked) >= f.every {
		f.checked = now
		f.reload()
	}
	t := f.tokens
	f.mu.Unlock()
	return t.Lookup(tok)
}

// reload reads the file and takes its tokens if its content changed and
// its mode allows.
func (f *TokenFile) reload() {
	data, refused, err := f.read()
	if err != nil {
		if err.Error() != f.lastErr {
			f.lastErr = err.Error()
			f.log.Error("tokens file unreadable; keeping the tokens read before", zap.String("path", f.path), zap.Error(err))
		}
		return
	}
	if refused != nil {
		if refused.Error() != f.lastErr {
			f.lastErr = refused.Error()
			f.log.Error("tokens file refused; keeping the tokens read before", zap.String("path", f.path), zap.Error(refused))
		}
		return
	}
	f.lastErr = ""
	sum := sha256.Sum256(data)
	if sum == f.sum {
		return
	}
	f.sum = sum
	t, err := ParseTokens(data)
	if err != nil {
		f.log.Error("tokens file changed but does not parse; keeping the tokens read before",
			zap.String("path", f.path), zap.Error(err))
		return
	}
	f.tokens = t
	f.log.Info("tokens file read again", zap.String("path", f.path), zap.Int("tokens", t.Len()))
}

// AppendToken adds an entry to the tokens file at path, creating the file
// (mode 0600) if it does not exist. The file is checked before and after and
// replaced in one rename, so a reader never sees half of it. It is not safe
// for two writers of one file at once: the later rename wins.
func AppendToken(path string, e TokenEntry) error {
	var list []TokenEntry
	data, err := os.ReadFile(path)
	switch {
	case errors.Is(err, os.ErrNotExist):
	case err != nil:
		return fmt.Errorf("tokens file: %w", err)
	default:
		if _, err := ParseTokens(data); err != nil {
			return fmt.Errorf("%s: %w", path, err)
		}
		if err := json.Unmarshal(data, &list); err != nil {
			return fmt.Errorf("%s: %w", path, err)
		}
	}
	list = append(list, e)
	out, err := json.MarshalIndent(list, "", "  ")
	if err != nil {
		return fmt.Errorf("encode tokens file: %w", err)
	}
	out = append(out, '\n')
	if _, err := ParseTokens(out); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), ".tokens-*.json")
	if err != nil {
		return fmt.Errorf("tokens file: %w", err)
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(out); err != nil {
		tmp.Close()
		return fmt.Errorf("tokens file: %w", err)
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return fmt.Errorf("tokens file: %w", err)
	}
	if err := tmp.Chmod(0o600); err != nil {
		tmp.Close()
		return fmt.Errorf("tokens file: %w", err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("tokens file: %w", err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return fmt.Errorf("tokens file: %w", err)
	}
	return nil
}
