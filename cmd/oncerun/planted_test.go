package main

import (
	"encoding/base64"
	"encoding/json"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/oncerun/oncerun/approvals"
	"github.com/oncerun/oncerun/internal/testcerts"
)

// secret is a credential planted in a variable (or a flag): none of its
// forms may appear in anything a command prints.
type secret struct {
	// where names the variable or flag that holds it.
	where string
	value string
	// user is the user beside it in a URL's user-info, whose Basic
	// credentials (base64 of user:value) are a form of it too.
	user string
}

// forms are the ways the secret could be printed: as it is, escaped for a
// URL's query or path, in base64, and as Basic credentials.
func (s secret) forms() []string {
	out := []string{s.value, url.QueryEscape(s.value), url.PathEscape(s.value),
		base64.StdEncoding.EncodeToString([]byte(s.value)), base64.RawURLEncoding.EncodeToString([]byte(s.value))}
	if s.user != "" {
		out = append(out, base64.StdEncoding.EncodeToString([]byte(s.user+":"+s.value)))
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// world is an environment with a distinct secret in every variable that
// holds a credential, every address in it refusing connections (the
// Temporal frontend, PostgreSQL, the payment provider, the webhook, the
// MCP server, SMTP, the approvals service), and the files it names.
type world struct {
	dir     string
	env     map[string]string
	secrets []secret
	// closed is a loopback address where nothing listens.
	closed string
}

// plant sets variable name to value, which holds s (a user-info password
// of user when user is not empty).
func (w *world) plant(name, value, s, user string) {
	w.env[name] = value
	w.secrets = append(w.secrets, secret{where: name, value: s, user: user})
}

func newWorld(t *testing.T) *world {
	t.Helper()
	w := &world{dir: t.TempDir(), env: map[string]string{}, closed: closedAddr(t)}
	c := w.closed
	w.plant("DATABASE_URL", "postgres://oncerun:db-pw%2Fs3cret@"+c+"/oncerun?sslmode=disable&connect_timeout=1", "db-pw/s3cret", "oncerun")
	w.plant("TEMPORAL_API_KEY", "temporal-api-key-s3cret", "temporal-api-key-s3cret", "")
	w.plant("TEMPORAL_GRPC_META_X_AUTH_TOKEN", "grpc-meta-s3cret", "grpc-meta-s3cret", "")
	ca := testcerts.NewCA(t, "oncerun-test-ca")
	pair := ca.Client(t, "worker")
	w.plant("TEMPORAL_TLS_CLIENT_KEY_DATA", readFile(t, pair.KeyPath), pemBody(t, pair.KeyPath), "")
	w.plant("TEMPORAL_TLS_CLIENT_CERT_DATA", readFile(t, pair.CertPath), pemBody(t, pair.CertPath), "")
	w.plant("TEMPORAL_TLS_SERVER_CA_CERT_DATA", readFile(t, ca.CertPath), pemBody(t, ca.CertPath), "")
	profile := filepath.Join(w.dir, "temporal.toml")
	require.NoError(t, os.WriteFile(profile, []byte("[profile.default]\napi_key = \"profile-api-key-s3cret\"\n"), 0o600))
	w.env["TEMPORAL_CONFIG_FILE"] = profile
	w.secrets = append(w.secrets, secret{where: "TEMPORAL_CONFIG_FILE's api_key", value: "profile-api-key-s3cret"})
	w.env["TEMPORAL_ADDRESS"] = c
	w.env["TEMPORAL_CONNECT_WAIT"] = "1s"
	w.plant("OPENAI_BASE_URL", "http://openai:openai-url-s3cret@"+c+"/v1", "openai-url-s3cret", "openai")
	w.plant("OPENAI_API_KEY", "sk-openai-key-s3cret", "sk-openai-key-s3cret", "")
	w.env["OPENAI_MODEL"] = "gpt-test"
	w.plant("PAYMENTS_BASE_URL", "http://shop:payments-url-s3cret@"+c, "payments-url-s3cret", "shop")
	w.plant("PAYMENTS_API_KEY", "sk_payments-key-s3cret", "sk_payments-key-s3cret", "")
	w.env["SMTP_ADDR"], w.env["SMTP_USERNAME"] = c, "mailer"
	w.plant("SMTP_PASSWORD", "smtp-pw-s3cret", "smtp-pw-s3cret", "")
	w.plant("ALERT_WEBHOOK_URL", "http://hook:hook-pw-s3cret@"+c+"/hooks/hook-path-s3cret?token=hook-token-s3cret", "hook-pw-s3cret", "hook")
	w.secrets = append(w.secrets, secret{where: "ALERT_WEBHOOK_URL's path", value: "hook-path-s3cret"},
		secret{where: "ALERT_WEBHOOK_URL's token", value: "hook-token-s3cret"})
	w.plant("DESK_MCP_TOKEN", "mcp-bearer-s3cret", "mcp-bearer-s3cret", "")
	w.secrets = append(w.secrets, secret{where: "the MCP server's URL", value: "mcp-url-s3cret", user: "desk"},
		secret{where: "the MCP server's api_key", value: "mcp-query-s3cret"})
	w.env["ONCERUN_MCP_CONFIG"] = w.mcpConfig(t, true)
	w.env["APPROVALS_TOKENS_FILE"] = w.tokensFile(t)
	w.env["METRICS_ADDR"], w.env["APPROVALS_ADDR"] = "127.0.0.1:0", "127.0.0.1:0"
	w.env["LOG_LEVEL"] = "debug"
	w.env["HOME"], w.env["USER"] = w.dir, "ops"
	return w
}

// throughAPI sends the CLI through an approvals service that refuses
// connections, with its token and a URL with a password.
func (w *world) throughAPI() {
	w.plant("ONCERUN_API", "http://ops:api-url-s3cret@"+w.closed, "api-url-s3cret", "ops")
	w.plant("ONCERUN_TOKEN", "oncerun_cli-token-s3cret", "oncerun_cli-token-s3cret", "")
}

// mcpConfig writes an MCP configuration of one http server that refuses
// connections, optional or not, with credentials in its URL and a bearer
// token, and returns its path.
func (w *world) mcpConfig(t *testing.T, optional bool) string {
	t.Helper()
	raw, err := json.Marshal(map[string]any{"servers": []any{map[string]any{
		"name": "desk", "transport": "http", "optional": optional,
		"url":              "http://desk:mcp-url-s3cret@" + w.closed + "/mcp?api_key=mcp-query-s3cret",
		"bearer_token_env": "DESK_MCP_TOKEN",
		"tools":            map[string]any{"open_ticket": map[string]any{}},
	}}})
	require.NoError(t, err)
	p := filepath.Join(t.TempDir(), "mcp.json")
	require.NoError(t, os.WriteFile(p, raw, 0o600))
	return p
}

// tokensFile writes a tokens file with one operator token, which is no
// variable's secret: the file holds its hash.
func (w *world) tokensFile(t *testing.T) string {
	t.Helper()
	raw, err := json.Marshal([]approvals.TokenEntry{{Name: "ops", Tenant: "acme", Role: "operator",
		TokenSHA256: approvals.TokenSHA256("oncerun_operator-token")}})
	require.NoError(t, err)
	p := filepath.Join(w.dir, "tokens.json")
	require.NoError(t, os.WriteFile(p, raw, 0o600))
	return p
}

// environ is the world's environment for a process: its variables and
// PATH, nothing of the test's own.
func (w *world) environ() []string {
	out := []string{"PATH=" + os.Getenv("PATH")}
	for k, v := range w.env {
		out = append(out, k+"="+v)
	}
	return out
}

// closedAddr is a loopback address where nothing listens.
func closedAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := l.Addr().String()
	require.NoError(t, l.Close())
	return addr
}

func readFile(t *testing.T, path string) string {
	t.Helper()
	raw, err := os.ReadFile(path)
	require.NoError(t, err)
	return string(raw)
}

// pemBody is the first line of base64 of a PEM file: what of its data would
// show if it were printed.
func pemBody(t *testing.T, path string) string {
	t.Helper()
	lines := strings.Split(readFile(t, path), "\n")
	require.Greater(t, len(lines), 2, path)
	return lines[1]
}
