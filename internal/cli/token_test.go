package cli_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/oncerun/oncerun/approvals"
	"github.com/oncerun/oncerun/internal/cli"
)

// runToken runs the CLI with args and returns what it printed to stdout
// and to stderr.
func runToken(t *testing.T, args ...string) (stdout, stderr string, err error) {
	t.Helper()
	root := cli.NewRoot(cli.Env{})
	var out, errOut bytes.Buffer
	root.SetArgs(args)
	err = cli.Execute(context.Background(), root, &out, &errOut)
	return out.String(), errOut.String(), err
}

// parseTokenOutput checks that out is two lines, a token and its entry, and
// returns them.
func parseTokenOutput(t *testing.T, out string) (string, map[string]string) {
	t.Helper()
	require.True(t, strings.HasSuffix(out, "\n"), "output ends with a newline: %q", out)
	lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
	require.Len(t, lines, 2, "output: %q", out)
	tok := lines[0]
	require.True(t, strings.HasPrefix(tok, "oncerun_"), tok)
	assert.Greater(t, len(tok), len("oncerun_")+40, "the token carries enough random bits: %q", tok)

	var entry map[string]string
	require.NoError(t, json.Unmarshal([]byte(lines[1]), &entry), lines[1])
	return tok, entry
}

func hexSHA256(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:])
}

func TestTokenNew(t *testing.T) {
	t.Parallel()
	out, errOut, err := runToken(t, "token", "new", "--name", "dana", "--tenant", "acme", "--role", "approver")
	require.NoError(t, err, out+errOut)
	assert.Empty(t, errOut)

	tok, entry := parseTokenOutput(t, out)
	assert.Equal(t, map[string]string{
		"token_sha256": hexSHA256(tok),
		"name":         "dana",
		"tenant":       "acme",
		"role":         "approver",
	}, entry)
	assert.NotContains(t, strings.SplitN(out, "\n", 2)[1], tok, "the entry does not hold the token")

	// The entry, as printed, is a valid tokens-file entry granting the token.
	second := strings.SplitN(out, "\n", 2)[1]
	tokens, err := approvals.ParseTokens([]byte("[" + second + "]"))
	require.NoError(t, err)
	id, ok := tokens.Lookup(tok)
	require.True(t, ok)
	assert.Equal(t, approvals.Identity{Name: "dana", Tenant: "acme", Role: approvals.RoleApprover}, id)

	// Every run makes a fresh token.
	out2, _, err := runToken(t, "token", "new", "--name", "dana", "--tenant", "acme", "--role", "approver")
	require.NoError(t, err)
	tok2, entry2 := parseTokenOutput(t, out2)
	assert.NotEqual(t, tok, tok2)
	assert.NotEqual(t, entry["token_sha256"], entry2["token_sha256"])
}

func TestTokenNewAddTo(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "tokens.json")

	out, errOut, err := runToken(t, "token", "new", "--name", "dana", "--tenant", "acme", "--role", "approver", "--add-to", path)
	require.NoError(t, err, out+errOut)
	dana, entry := parseTokenOutput(t, out)
	assert.Equal(t, hexSHA256(dana), entry["token_sha256"])
	assert.Contains(t, errOut, "added dana (approver of tenant acme) to "+path)

	fi, err := os.Stat(path)
	require.NoError(t, err)
	assert.Equal(t, fs.FileMode(0o600), fi.Mode().Perm())

	// A second token is added to the same file; both are granted.
	out, errOut, err = runToken(t, "token", "new", "--name", "olga", "--tenant", "acme", "--role", "operator", "--add-to", path)
	require.NoError(t, err, out+errOut)
	olga, _ := parseTokenOutput(t, out)

	data, err := os.ReadFile(path)
	require.NoError(t, err)
	assert.NotContains(t, string(data), dana, "the tokens file does not hold the token")
	tokens, err := approvals.ParseTokens(data)
	require.NoError(t, err, string(data))
	assert.Equal(t, 2, tokens.Len())
	id, ok := tokens.Lookup(dana)
	require.True(t, ok)
	assert.Equal(t, approvals.Identity{Name: "dana", Tenant: "acme", Role: approvals.RoleApprover}, id)
	id, ok = tokens.Lookup(olga)
	require.True(t, ok)
	assert.Equal(t, approvals.Identity{Name: "olga", Tenant: "acme", Role: approvals.RoleOperator}, id)
}

func TestTokenNewAddToBrokenFile(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "tokens.json")
	broken := []byte("[{\"token_sha256\": \"half an edit\n")
	require.NoError(t, os.WriteFile(path, broken, 0o600))

	out, errOut, err := runToken(t, "token", "new", "--name", "dana", "--tenant", "acme", "--role", "approver", "--add-to", path)
	require.Error(t, err)
	assert.Contains(t, err.Error(), path)
	assert.NotContains(t, out, "oncerun_", "no token is printed when it was not added")
	assert.NotContains(t, errOut, "added")

	data, err := os.ReadFile(path)
	require.NoError(t, err)
	assert.Equal(t, broken, data, "the file is unchanged")
}

func TestTokenNewBadInput(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		args []string
		want string
	}{
		{"bad role", []string{"--name", "dana", "--tenant", "acme", "--role", "admin"}, `role "admin" is not viewer, approver or operator`},
		{"missing name", []string{"--tenant", "acme", "--role", "approver"}, `required flag(s) "name" not set`},
		{"empty name", []string{"--name", "", "--tenant", "acme", "--role", "approver"}, "name is empty"},
		{"missing tenant", []string{"--name", "dana", "--role", "approver"}, `required flag(s) "tenant" not set`},
		{"tenant with a control character", []string{"--name", "dana", "--tenant", "ac\x1bme", "--role", "approver"}, "control character"},
		{"missing role", []string{"--name", "dana", "--tenant", "acme"}, `required flag(s) "role" not set`},
		{"stray argument", []string{"--name", "dana", "--tenant", "acme", "--role", "approver", "extra"}, `unknown command "extra"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			path := filepath.Join(t.TempDir(), "tokens.json")
			args := append([]string{"token", "new", "--add-to", path}, tt.args...)
			out, _, err := runToken(t, args...)
			require.Error(t, err)
			assert.Contains(t, err.Error(), tt.want)
			assert.NotContains(t, out, "oncerun_", "no token is printed")
			_, err = os.Stat(path)
			assert.True(t, errors.Is(err, fs.ErrNotExist), "no tokens file is written: %v", err)
		})
	}
}
