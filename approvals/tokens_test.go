package approvals_test

import (
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/oncerun/oncerun/approvals"
)

// Hashes used in tokens files written by hand.
var (
	hashA = strings.Repeat("a", 64)
	hashB = strings.Repeat("b", 64)
)

// entryJSON is one tokens-file entry as JSON.
func entryJSON(hash, name, tenant, role string) string {
	b, err := json.Marshal(map[string]string{"token_sha256": hash, "name": name, "tenant": tenant, "role": role})
	if err != nil {
		panic(err)
	}
	return string(b)
}

// tokensJSON is a tokens file listing entries.
func tokensJSON(t *testing.T, entries ...approvals.TokenEntry) []byte {
	t.Helper()
	if entries == nil {
		entries = []approvals.TokenEntry{}
	}
	b, err := json.MarshalIndent(entries, "", "  ")
	require.NoError(t, err)
	return append(b, '\n')
}

// newToken makes a token for name in tenant acme with role.
func newToken(t *testing.T, name string, role approvals.Role) (string, approvals.TokenEntry) {
	t.Helper()
	tok, e, err := approvals.NewToken(approvals.Identity{Name: name, Tenant: "acme", Role: role})
	require.NoError(t, err)
	return tok, e
}

func sha256Hex(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:])
}

func TestParseTokensRefuses(t *testing.T) {
	t.Parallel()
	good := entryJSON(hashA, "alice", "acme", "viewer")
	second := func(e string) string { return "[" + good + ",\n" + e + "]" }
	tests := []struct {
		name string
		data string
		want []string // every one must be in the error
	}{
		{"empty file", ``, []string{"not a JSON array"}},
		{"not JSON", `tokens: yes`, []string{"not a JSON array"}},
		{"object, not array", good, []string{"not a JSON array"}},
		{"array of strings", `["` + hashA + `"]`, []string{"entry 1:", "not an object"}},
		{"null", `null`, []string{"not a JSON array"}},
		{"a closing bracket too many", "[" + good + "]]", []string{"unexpected data after the array"}},
		{"a closing brace after the array", "[" + good + "]}", []string{"unexpected data after the array"}},
		{"a field in capitals", `[{"TOKEN_SHA256":"` + hashA + `","name":"alice","tenant":"acme","role":"viewer"}]`, []string{"entry 1:", `unknown field "TOKEN_SHA256"`}},
		{"data after the array", "[" + good + "]\n[]", []string{"unexpected data after the array"}},
		{
			"unknown field",
			`[{"token_sha256":"` + hashA + `","name":"alice","tenant":"acme","role":"viewer","admin":true}]`,
			[]string{"entry 1:", `unknown field "admin"`},
		},
		{"hash too short", second(entryJSON("abc123", "bob", "acme", "viewer")), []string{`entry 2 ("bob")`, "token_sha256 must be 64 hex digits"}},
		{"hash too long", second(entryJSON(hashB+"bb", "bob", "acme", "viewer")), []string{`entry 2 ("bob")`, "token_sha256 must be 64 hex digits"}},
		{"hash not hex", second(entryJSON(strings.Repeat("z", 64), "bob", "acme", "viewer")), []string{`entry 2 ("bob")`, "token_sha256 must be 64 hex digits"}},
		{"hash empty", second(entryJSON("", "bob", "acme", "viewer")), []string{`entry 2 ("bob")`, "token_sha256 must be 64 hex digits"}},
		{"hash missing", second(`{"name":"bob","tenant":"acme","role":"viewer"}`), []string{`entry 2 ("bob")`, "token_sha256 must be 64 hex digits"}},
		{"empty name", second(entryJSON(hashB, "", "acme", "viewer")), []string{"entry 2:", "name is empty"}},
		{"name too long", second(entryJSON(hashB, strings.Repeat("n", 129), "acme", "viewer")), []string{"entry 2:", "name is 129 bytes; the limit is 128"}},
		{"name with NUL", second(`{"token_sha256":"` + hashB + `","name":"bo\u0000b","tenant":"acme","role":"viewer"}`), []string{"entry 2:", "name", "NUL"}},
		{"name with a right-to-left override", second(entryJSON(hashB, "bob\u202e", "acme", "viewer")), []string{"entry 2:", "format character U+202E"}},
		{"tenant in fullwidth letters", second(entryJSON(hashB, "bob", "ａｃｍｅ", "viewer")), []string{"entry 2:", `NFKC form is "acme"`}},
		{"a field twice", second(`{"token_sha256":"` + hashB + `","name":"bob","tenant":"acme","role":"viewer","role":"operator"}`), []string{"entry 2:", `field "role" appears twice`}},
		{"empty tenant", second(entryJSON(hashB, "bob", "", "viewer")), []string{"entry 2:", "tenant is empty"}},
		{"tenant with a control character", second(entryJSON(hashB, "bob", "ac\nme", "viewer")), []string{"entry 2:", `tenant "ac\nme"`, "control character"}},
		{"tenant with NUL", second(`{"token_sha256":"` + hashB + `","name":"bob","tenant":"ac\u0000me","role":"viewer"}`), []string{"entry 2:", "NUL character"}},
		{"unknown role", second(entryJSON(hashB, "bob", "acme", "admin")), []string{"entry 2:", `role "admin" is not viewer, approver or operator`}},
		{"empty role", second(entryJSON(hashB, "bob", "acme", "")), []string{"entry 2:", `role "" is not viewer, approver or operator`}},
		{"role in capitals", second(entryJSON(hashB, "bob", "acme", "Approver")), []string{"entry 2:", `role "Approver"`}},
		{
			"same hash twice",
			"[" + good + "," + entryJSON(hashB, "bob", "acme", "viewer") + "," + entryJSON(hashA, "carol", "acme", "operator") + "]",
			[]string{`entry 3 ("carol") has the same token_sha256 as entry 1`},
		},
		{
			"same hash twice, once in capitals",
			"[" + good + "," + entryJSON(strings.ToUpper(hashA), "carol", "acme", "operator") + "]",
			[]string{`entry 2 ("carol") has the same token_sha256 as entry 1`},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			tokens, err := approvals.ParseTokens([]byte(tt.data))
			require.Error(t, err)
			assert.Nil(t, tokens)
			for _, w := range tt.want {
				assert.Contains(t, err.Error(), w)
			}
		})
	}
}

func TestParseTokensAccepts(t *testing.T) {
	t.Parallel()
	data := "[\n  " + entryJSON(hashA, "alice", "acme", "viewer") +
		",\n  " + entryJSON(strings.ToUpper(hashB), "bob", "acme", "approver") +
		",\n  " + entryJSON(strings.Repeat("c", 64), "carol", "globex", "operator") + "\n]\n"
	tokens, err := approvals.ParseTokens([]byte(data))
	require.NoError(t, err)
	assert.Equal(t, 3, tokens.Len())

	empty, err := approvals.ParseTokens([]byte("[]"))
	require.NoError(t, err)
	assert.Equal(t, 0, empty.Len())
	_, ok := empty.Lookup("")
	assert.False(t, ok)
}

func TestTokensLookup(t *testing.T) {
	t.Parallel()
	alice, aliceEntry := newToken(t, "alice", approvals.RoleViewer)
	bob, bobEntry := newToken(t, "bob", approvals.RoleApprover)
	_, carolEntry := newToken(t, "carol", approvals.RoleOperator)
	tokens, err := approvals.ParseTokens(tokensJSON(t, aliceEntry, bobEntry, carolEntry))
	require.NoError(t, err)

	id, ok := tokens.Lookup(alice)
	require.True(t, ok)
	assert.Equal(t, approvals.Identity{Name: "alice", Tenant: "acme", Role: approvals.RoleViewer}, id)
	id, ok = tokens.Lookup(bob)
	require.True(t, ok)
	assert.Equal(t, approvals.Identity{Name: "bob", Tenant: "acme", Role: approvals.RoleApprover}, id)

	// A hash in capitals in the file matches too.
	upper := bobEntry
	upper.TokenSHA256 = strings.ToUpper(upper.TokenSHA256)
	tokens2, err := approvals.ParseTokens(tokensJSON(t, aliceEntry, upper))
	require.NoError(t, err)
	id, ok = tokens2.Lookup(bob)
	require.True(t, ok)
	assert.Equal(t, "bob", id.Name)

	stranger, _ := newToken(t, "mallory", approvals.RoleOperator)
	refused := map[string]string{
		"unknown token":           stranger,
		"empty string":            "",
		"hash of a listed token":  aliceEntry.TokenSHA256,
		"listed token plus space": alice + " ",
		"listed token truncated":  alice[:len(alice)-1],
		"prefix only":             approvals.TokenPrefix,
	}
	for name, tok := range refused {
		id, ok := tokens.Lookup(tok)
		assert.False(t, ok, name)
		assert.Zero(t, id, name)
	}
}

func TestNewToken(t *testing.T) {
	t.Parallel()
	want := approvals.Identity{Name: "dana", Tenant: "acme", Role: approvals.RoleApprover}
	tok, entry, err := approvals.NewToken(want)
	require.NoError(t, err)

	require.True(t, strings.HasPrefix(tok, approvals.TokenPrefix), tok)
	raw, err := base64.RawURLEncoding.DecodeString(strings.TrimPrefix(tok, approvals.TokenPrefix))
	require.NoError(t, err, tok)
	assert.Len(t, raw, 32, "a token carries 256 random bits")

	assert.Equal(t, sha256Hex(tok), entry.TokenSHA256)
	assert.Equal(t, approvals.TokenSHA256(tok), entry.TokenSHA256)
	assert.Equal(t, approvals.TokenEntry{TokenSHA256: sha256Hex(tok), Name: "dana", Tenant: "acme", Role: approvals.RoleApprover}, entry)
	assert.NotContains(t, entry.TokenSHA256, strings.TrimPrefix(tok, approvals.TokenPrefix), "the entry must not hold the token")

	tok2, entry2, err := approvals.NewToken(want)
	require.NoError(t, err)
	assert.NotEqual(t, tok, tok2)
	assert.NotEqual(t, entry.TokenSHA256, entry2.TokenSHA256)

	// The entry is accepted by ParseTokens and grants the token.
	tokens, err := approvals.ParseTokens(tokensJSON(t, entry))
	require.NoError(t, err)
	id, ok := tokens.Lookup(tok)
	require.True(t, ok)
	assert.Equal(t, want, id)
}

func TestNewTokenRefusesInvalidIdentity(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		id   approvals.Identity
		want string
	}{
		{"empty name", approvals.Identity{Tenant: "acme", Role: approvals.RoleViewer}, "name is empty"},
		{"name too long", approvals.Identity{Name: strings.Repeat("n", 129), Tenant: "acme", Role: approvals.RoleViewer}, "the limit is 128"},
		{"name with an escape", approvals.Identity{Name: "dana\x1b[2J", Tenant: "acme", Role: approvals.RoleViewer}, "control character U+001B"},
		{"empty tenant", approvals.Identity{Name: "dana", Role: approvals.RoleViewer}, "tenant is empty"},
		{"tenant with a control character", approvals.Identity{Name: "dana", Tenant: "ac\tme", Role: approvals.RoleViewer}, "control character"},
		{"unknown role", approvals.Identity{Name: "dana", Tenant: "acme", Role: "root"}, `role "root" is not viewer, approver or operator`},
		{"empty role", approvals.Identity{Name: "dana", Tenant: "acme"}, `role ""`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			tok, entry, err := approvals.NewToken(tt.id)
			require.Error(t, err)
			assert.Contains(t, err.Error(), tt.want)
			assert.Empty(t, tok)
			assert.Zero(t, entry)
		})
	}

	// The longest name allowed is fine.
	_, _, err := approvals.NewToken(approvals.Identity{Name: strings.Repeat("n", 128), Tenant: "acme", Role: approvals.RoleViewer})
	assert.NoError(t, err)
}

func TestTokenSHA256(t *testing.T) {
	t.Parallel()
	// SHA-256 of "abc", FIPS 180-2 appendix B.1.
	assert.Equal(t, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad", approvals.TokenSHA256("abc"))
	assert.Equal(t, sha256Hex(""), approvals.TokenSHA256(""))
}

func TestRolePermissions(t *testing.T) {
	t.Parallel()
	tests := []struct {
		role         approvals.Role
		decide, star bool
	}{
		{approvals.RoleViewer, false, false},
		{approvals.RoleApprover, true, false},
		{approvals.RoleOperator, true, true},
		{"", false, false},
		{"admin", false, false},
		{"Operator", false, false},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprintf("%q", tt.role), func(t *testing.T) {
			t.Parallel()
			assert.Equal(t, tt.decide, tt.role.CanDecide(), "CanDecide")
			assert.Equal(t, tt.star, tt.role.CanStart(), "CanStart")
		})
	}
}

// readTokens parses the tokens file at path.
func readTokens(t *testing.T, path string) *approvals.Tokens {
	t.Helper()
	data, err := os.ReadFile(path)
	require.NoError(t, err)
	tokens, err := approvals.ParseTokens(data)
	require.NoError(t, err, string(data))
	return tokens
}

// assertOnlyFile asserts that dir holds just the file name: no temporary
// files are left behind.
func assertOnlyFile(t *testing.T, dir, name string) {
	t.Helper()
	ents, err := os.ReadDir(dir)
	require.NoError(t, err)
	var names []string
	for _, e := range ents {
		names = append(names, e.Name())
	}
	assert.Equal(t, []string{name}, names)
}

func TestAppendTokenCreatesFile(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	path := filepath.Join(dir, "tokens.json")
	tok, entry := newToken(t, "dana", approvals.RoleApprover)

	require.NoError(t, approvals.AppendToken(path, entry))

	fi, err := os.Stat(path)
	require.NoError(t, err)
	assert.Equal(t, fs.FileMode(0o600), fi.Mode().Perm())
	assert.True(t, fi.Mode().IsRegular())
	assertOnlyFile(t, dir, "tokens.json")

	tokens := readTokens(t, path)
	assert.Equal(t, 1, tokens.Len())
	id, ok := tokens.Lookup(tok)
	require.True(t, ok)
	assert.Equal(t, approvals.Identity{Name: "dana", Tenant: "acme", Role: approvals.RoleApprover}, id)

	data, err := os.ReadFile(path)
	require.NoError(t, err)
	assert.NotContains(t, string(data), tok, "the tokens file must not hold the token")
}

func TestAppendTokenAppends(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	path := filepath.Join(dir, "tokens.json")
	alice, aliceEntry := newToken(t, "alice", approvals.RoleViewer)
	bob, bobEntry := newToken(t, "bob", approvals.RoleOperator)
	require.NoError(t, os.WriteFile(path, tokensJSON(t, aliceEntry), 0o600))

	require.NoError(t, approvals.AppendToken(path, bobEntry))

	tokens := readTokens(t, path)
	assert.Equal(t, 2, tokens.Len())
	id, ok := tokens.Lookup(alice)
	require.True(t, ok, "the earlier entry is kept")
	assert.Equal(t, "alice", id.Name)
	id, ok = tokens.Lookup(bob)
	require.True(t, ok)
	assert.Equal(t, approvals.Identity{Name: "bob", Tenant: "acme", Role: approvals.RoleOperator}, id)

	var list []approvals.TokenEntry
	data, err := os.ReadFile(path)
	require.NoError(t, err)
	require.NoError(t, json.Unmarshal(data, &list))
	assert.Equal(t, []approvals.TokenEntry{aliceEntry, bobEntry}, list, "entries in order, the new one last")

	fi, err := os.Stat(path)
	require.NoError(t, err)
	assert.Equal(t, fs.FileMode(0o600), fi.Mode().Perm())
	assertOnlyFile(t, dir, "tokens.json")
}

func TestAppendTokenRefuses(t *testing.T) {
	t.Parallel()
	_, aliceEntry := newToken(t, "alice", approvals.RoleViewer)
	_, bobEntry := newToken(t, "bob", approvals.RoleApprover)
	tests := []struct {
		name     string
		existing []byte // nil: no file
		entry    approvals.TokenEntry
		want     []string
	}{
		{"file is not JSON", []byte("{ this is not json\n"), bobEntry, []string{"not a JSON array"}},
		{"file is an object", []byte(entryJSON(hashA, "alice", "acme", "viewer")), bobEntry, []string{"not a JSON array"}},
		{"file has a bad entry", []byte("[" + entryJSON(hashA, "alice", "acme", "admin") + "]"), bobEntry, []string{"entry 1", `role "admin"`}},
		{"duplicate entry", tokensJSON(t, aliceEntry, bobEntry), aliceEntry, []string{`entry 3 ("alice") has the same token_sha256 as entry 1`}},
		{"duplicate hash, other name", tokensJSON(t, aliceEntry), approvals.TokenEntry{TokenSHA256: aliceEntry.TokenSHA256, Name: "eve", Tenant: "acme", Role: approvals.RoleOperator}, []string{"entry 2", "same token_sha256 as entry 1"}},
		{"invalid new entry", tokensJSON(t, aliceEntry), approvals.TokenEntry{TokenSHA256: hashB, Name: "bob", Tenant: "acme", Role: "admin"}, []string{"entry 2", `role "admin"`}},
		{"invalid new entry, no file", nil, approvals.TokenEntry{TokenSHA256: "abc", Name: "bob", Tenant: "acme", Role: approvals.RoleViewer}, []string{"entry 1", "64 hex digits"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			path := filepath.Join(dir, "tokens.json")
			if tt.existing != nil {
				require.NoError(t, os.WriteFile(path, tt.existing, 0o644))
			}

			err := approvals.AppendToken(path, tt.entry)
			require.Error(t, err)
			for _, w := range tt.want {
				assert.Contains(t, err.Error(), w)
			}

			if tt.existing == nil {
				_, err := os.Stat(path)
				assert.True(t, errors.Is(err, fs.ErrNotExist), "no file is created: %v", err)
				ents, err := os.ReadDir(dir)
				require.NoError(t, err)
				assert.Empty(t, ents, "no temporary file is left")
				return
			}
			assert.Contains(t, err.Error(), path, "the error names the file")
			data, err := os.ReadFile(path)
			require.NoError(t, err)
			assert.Equal(t, tt.existing, data, "the file is unchanged")
			fi, err := os.Stat(path)
			require.NoError(t, err)
			assert.Equal(t, fs.FileMode(0o644), fi.Mode().Perm(), "the file's mode is unchanged")
			assertOnlyFile(t, dir, "tokens.json")
		})
	}
}

func TestOpenTokenFileRefuses(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()

	_, err := approvals.OpenTokenFile(filepath.Join(dir, "missing.json"), approvals.TokenFileConfig{})
	require.Error(t, err)
	assert.ErrorIs(t, err, fs.ErrNotExist)
	assert.Contains(t, err.Error(), "missing.json")

	bad := filepath.Join(dir, "bad.json")
	require.NoError(t, os.WriteFile(bad, []byte(`[{"token_sha256":"abc","name":"x","tenant":"acme","role":"viewer"}]`), 0o600))
	_, err = approvals.OpenTokenFile(bad, approvals.TokenFileConfig{})
	require.Error(t, err)
	assert.Contains(t, err.Error(), bad)
	assert.Contains(t, err.Error(), "entry 1")
}

// openTokenFile writes entries to a fresh tokens file and opens it, with a
// logger whose entries the test can see.
func openTokenFile(t *testing.T, entries ...approvals.TokenEntry) (*approvals.TokenFile, string, *observer.ObservedLogs) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "tokens.json")
	require.NoError(t, os.WriteFile(path, tokensJSON(t, entries...), 0o600))
	core, logs := observer.New(zapcore.DebugLevel)
	f, err := approvals.OpenTokenFile(path, approvals.TokenFileConfig{Log: zap.New(core)})
	require.NoError(t, err)
	return f, path, logs
}

// TestTokenFileOthersMayWriteIsRefused: whoever can write the tokens file
// can grant themselves any role, so a file others may write is refused at
// start and on reload, unless the deployment says otherwise.
func TestTokenFileOthersMayWriteIsRefused(t *testing.T) {
	t.Parallel()
	alice, aliceEntry := newToken(t, "alice", approvals.RoleViewer)
	for _, mode := range []os.FileMode{0o622, 0o602, 0o620} {
		path := filepath.Join(t.TempDir(), "tokens.json")
		require.NoError(t, os.WriteFile(path, tokensJSON(t, aliceEntry), 0o600))
		require.NoError(t, os.Chmod(path, mode))
		_, err := approvals.OpenTokenFile(path, approvals.TokenFileConfig{})
		require.Error(t, err, "mode %04o", mode)
		assert.Contains(t, err.Error(), "writable by users other than its owner")
		assert.Contains(t, err.Error(), "APPROVALS_TOKENS_FILE_INSECURE")

		core, logs := observer.New(zapcore.DebugLevel)
		f, err := approvals.OpenTokenFile(path, approvals.TokenFileConfig{Log: zap.New(core), AllowWritable: true})
		require.NoError(t, err, "allowed explicitly")
		_, ok := f.Lookup(alice)
		assert.True(t, ok)
		assert.Equal(t, 1, logs.FilterMessageSnippet("writable by users other than its owner").Len(), "and warned about")
	}

	// A file that becomes writable by others is not read again.
	f, path, logs := openTokenFile(t, aliceEntry)
	bob, bobEntry := newToken(t, "bob", approvals.RoleOperator)
	require.NoError(t, os.WriteFile(path, tokensJSON(t, aliceEntry, bobEntry), 0o600))
	require.NoError(t, os.Chmod(path, 0o666))
	waitForLog(t, f, logs, "tokens file refused")
	_, ok := f.Lookup(bob)
	assert.False(t, ok, "the tokens of a file others may write are not taken")
	_, ok = f.Lookup(alice)
	assert.True(t, ok, "the tokens read before stay in force")
	require.NoError(t, os.Chmod(path, 0o600))
	waitForLookup(t, f, bob, true, "once the mode is fixed, the file is read again")
}

// TestTokenFileOfAnotherUserIsRefused: a file whose owner is neither this
// process's user nor root can be rewritten by that owner, whatever its mode.
func TestTokenFileOfAnotherUserIsRefused(t *testing.T) {
	t.Parallel()
	if os.Geteuid() != 0 {
		t.Skip("giving a file to another user takes root")
	}
	_, aliceEntry := newToken(t, "alice", approvals.RoleViewer)
	path := filepath.Join(t.TempDir(), "tokens.json")
	require.NoError(t, os.WriteFile(path, tokensJSON(t, aliceEntry), 0o600))
	require.NoError(t, os.Chown(path, 4242, 4242))
	_, err := approvals.OpenTokenFile(path, approvals.TokenFileConfig{})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "is owned by uid 4242, neither this process's user (uid 0) nor root")
	_, err = approvals.OpenTokenFile(path, approvals.TokenFileConfig{AllowWritable: true})
	assert.NoError(t, err)
}

// TestTokenFileOthersMayReadIsWarnedAbout: the file holds hashes, not
// tokens, so a file others may read (as mounted secrets often are) is
// loaded, with a warning.
func TestTokenFileOthersMayReadIsWarnedAbout(t *testing.T) {
	t.Parallel()
	alice, aliceEntry := newToken(t, "alice", approvals.RoleViewer)
	path := filepath.Join(t.TempDir(), "tokens.json")
	require.NoError(t, os.WriteFile(path, tokensJSON(t, aliceEntry), 0o600))
	require.NoError(t, os.Chmod(path, 0o644))
	core, logs := observer.New(zapcore.DebugLevel)
	f, err := approvals.OpenTokenFile(path, approvals.TokenFileConfig{Log: zap.New(core)})
	require.NoError(t, err)
	_, ok := f.Lookup(alice)
	assert.True(t, ok)
	warned := logs.FilterMessageSnippet("readable by other users")
	require.Equal(t, 1, warned.Len())
	assert.Equal(t, "0644", warned.All()[0].ContextMap()["mode"])

	quiet, _, quietLogs := openTokenFile(t, aliceEntry)
	_, ok = quiet.Lookup(alice)
	assert.True(t, ok)
	assert.Zero(t, quietLogs.Len(), "a file of mode 0600 is loaded without a word")
}

// waitForLog looks tokens up in f until a log entry contains snippet: f
// reads its file again on a lookup, no more than once a second.
func waitForLog(t *testing.T, f *approvals.TokenFile, logs *observer.ObservedLogs, snippet string) {
	t.Helper()
	require.Eventually(t, func() bool {
		f.Lookup("")
		return logs.FilterMessageSnippet(snippet).Len() > 0
	}, 10*time.Second, 50*time.Millisecond, "no log entry says %q", snippet)
}

// replaceFile replaces the file at path with data in one rename, as an
// editor or config management would.
func replaceFile(t *testing.T, path string, data []byte) {
	t.Helper()
	tmp := path + ".new"
	require.NoError(t, os.WriteFile(tmp, data, 0o600))
	require.NoError(t, os.Rename(tmp, path))
}

func TestTokenFileLookup(t *testing.T) {
	t.Parallel()
	alice, aliceEntry := newToken(t, "alice", approvals.RoleViewer)
	bob, bobEntry := newToken(t, "bob", approvals.RoleApprover)
	f, _, _ := openTokenFile(t, aliceEntry, bobEntry)
	assert.Equal(t, 2, f.Len())

	id, ok := f.Lookup(bob)
	require.True(t, ok)
	assert.Equal(t, approvals.Identity{Name: "bob", Tenant: "acme", Role: approvals.RoleApprover}, id)
	id, ok = f.Lookup(alice)
	require.True(t, ok)
	assert.Equal(t, "alice", id.Name)

	for _, tok := range []string{"", aliceEntry.TokenSHA256, alice + "x"} {
		_, ok := f.Lookup(tok)
		assert.False(t, ok, tok)
	}

	var src approvals.TokenSource = f
	_, ok = src.Lookup(alice)
	assert.True(t, ok)
}

// waitForLookup polls f until tok is granted (want true) or refused (want
// false); the file is looked at no more than once a second.
func waitForLookup(t *testing.T, f *approvals.TokenFile, tok string, want bool, msg string) {
	t.Helper()
	require.Eventually(t, func() bool {
		_, ok := f.Lookup(tok)
		return ok == want
	}, 5*time.Second, 100*time.Millisecond, msg)
}

func TestTokenFileRereadsChangedFile(t *testing.T) {
	t.Parallel()
	alice, aliceEntry := newToken(t, "alice", approvals.RoleViewer)
	f, path, logs := openTokenFile(t, aliceEntry)
	_, ok := f.Lookup(alice)
	require.True(t, ok)

	fi, err := os.Stat(path)
	require.NoError(t, err)

	// Alice's token is revoked and Bob's added: the file's size changes.
	// Its mtime is set back, so only the size tells that it changed.
	bob, bobEntry := newToken(t, "bob-the-approver", approvals.RoleApprover)
	data := tokensJSON(t, bobEntry)
	require.NotEqual(t, fi.Size(), int64(len(data)))
	replaceFile(t, path, data)
	require.NoError(t, os.Chtimes(path, fi.ModTime(), fi.ModTime()))

	waitForLookup(t, f, bob, true, "the new token is granted once the file is read again")
	id, ok := f.Lookup(bob)
	require.True(t, ok)
	assert.Equal(t, approvals.Identity{Name: "bob-the-approver", Tenant: "acme", Role: approvals.RoleApprover}, id)
	_, ok = f.Lookup(alice)
	assert.False(t, ok, "the removed token is refused")
	assert.Equal(t, 1, f.Len())
	assert.Equal(t, 1, logs.FilterMessage("tokens file read again").Len())
}

func TestTokenFileRereadsSameSizeFile(t *testing.T) {
	t.Parallel()
	alice, aliceEntry := newToken(t, "alice", approvals.RoleViewer)
	f, path, _ := openTokenFile(t, aliceEntry)
	fi, err := os.Stat(path)
	require.NoError(t, err)

	// The same person's token is replaced: the file keeps its size, only
	// its mtime tells that it changed.
	carol, carolEntry := newToken(t, "alice", approvals.RoleViewer)
	data := tokensJSON(t, carolEntry)
	require.Len(t, data, int(fi.Size()))
	replaceFile(t, path, data)
	later := fi.ModTime().Add(3 * time.Second)
	require.NoError(t, os.Chtimes(path, later, later))

	waitForLookup(t, f, carol, true, "the new token is granted once the file is read again")
	_, ok := f.Lookup(alice)
	assert.False(t, ok, "the replaced token is refused")
}

func TestTokenFileKeepsTokensWhenFileBreaks(t *testing.T) {
	t.Parallel()
	alice, aliceEntry := newToken(t, "alice", approvals.RoleViewer)
	f, path, logs := openTokenFile(t, aliceEntry)
	_, ok := f.Lookup(alice)
	require.True(t, ok)

	replaceFile(t, path, []byte(`[{"token_sha256": "half an edit`))

	// Keep looking alice up until the broken file has been seen; every
	// lookup meanwhile, and after, must still grant her token.
	var refused atomic.Int32
	require.Eventually(t, func() bool {
		if _, ok := f.Lookup(alice); !ok {
			refused.Add(1)
		}
		return logs.FilterMessageSnippet("does not parse").Len() > 0
	}, 5*time.Second, 100*time.Millisecond, "the broken file is noticed")
	assert.Zero(t, refused.Load(), "alice's token was refused while the file was broken")
	id, ok := f.Lookup(alice)
	require.True(t, ok, "the tokens read before stay in force")
	assert.Equal(t, "alice", id.Name)
	assert.Equal(t, 1, f.Len())
	broken := logs.FilterMessageSnippet("does not parse").All()
	require.NotEmpty(t, broken)
	assert.Equal(t, zapcore.ErrorLevel, broken[0].Level)
	// The broken file is not read again while it stays as it is, so it is
	// reported once, not on every check.
	assert.Never(t, func() bool {
		if _, ok := f.Lookup(alice); !ok {
			refused.Add(1)
		}
		return logs.FilterMessageSnippet("does not parse").Len() > 1
	}, 2500*time.Millisecond, 100*time.Millisecond, "the unchanged broken file was read again")
	assert.Zero(t, refused.Load(), "alice's token was refused while the file was broken")

	// Once the file is fixed, it is read again.
	bob, bobEntry := newToken(t, "bob", approvals.RoleApprover)
	replaceFile(t, path, tokensJSON(t, aliceEntry, bobEntry))
	waitForLookup(t, f, bob, true, "the fixed file is read again")
	_, ok = f.Lookup(alice)
	assert.True(t, ok)
	assert.Equal(t, 2, f.Len())
}

func TestTokenFileKeepsTokensWhenFileVanishes(t *testing.T) {
	t.Parallel()
	alice, aliceEntry := newToken(t, "alice", approvals.RoleViewer)
	f, path, logs := openTokenFile(t, aliceEntry)

	require.NoError(t, os.Remove(path))

	var refused atomic.Int32
	require.Eventually(t, func() bool {
		if _, ok := f.Lookup(alice); !ok {
			refused.Add(1)
		}
		return logs.FilterMessageSnippet("unreadable").Len() > 0
	}, 5*time.Second, 100*time.Millisecond, "the missing file is noticed")
	assert.Zero(t, refused.Load())
	_, ok := f.Lookup(alice)
	assert.True(t, ok, "the tokens read before stay in force")
}
