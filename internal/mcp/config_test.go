package mcp_test

import (
	"os"
	"path/filepath"
	"regexp"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/oncerun/oncerun/internal/mcp"
	"github.com/oncerun/oncerun/tools"
)

// exampleYAML is the configuration the docs show.
const exampleYAML = `
servers:
  - name: payments
    transport: http
    url: https://mcp.payments.example.com/mcp
    bearer_token_env: PAYMENTS_MCP_TOKEN
    tools:
      refund:
        class: external
        approval: {field: amount_cents, above: 10000}
        paired_read: find_refund
        idempotent: true
        key_lifetime: 24h
        retention: 720h
        timeout: 90s
      find_refund:
        class: read
  - name: files
    transport: stdio
    command: /usr/local/bin/files-mcp
    args: [--root, /srv/shared]
    env: {FILES_MODE: ro}
    optional: true
    unlisted: approve
    tools:
      read_file: {class: read}
      delete_file: {approval: always}
`

const exampleJSON = `{"servers": [
  {"name": "payments", "transport": "http", "url": "https://mcp.payments.example.com/mcp",
   "bearer_token_env": "PAYMENTS_MCP_TOKEN",
   "tools": {
     "refund": {"class": "external", "approval": {"field": "amount_cents", "above": 10000},
                "paired_read": "find_refund", "idempotent": true, "key_lifetime": "24h",
                "retention": "720h", "timeout": "90s"},
     "find_refund": {"class": "read"}}},
  {"name": "files", "transport": "stdio", "command": "/usr/local/bin/files-mcp",
   "args": ["--root", "/srv/shared"], "env": {"FILES_MODE": "ro"},
   "optional": true, "unlisted": "approve",
   "tools": {"read_file": {"class": "read"}, "delete_file": {"approval": "always"}}}]}`

// writeConfig writes content to a file named name in a new directory.
func writeConfig(t *testing.T, name, content string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), name)
	require.NoError(t, os.WriteFile(path, []byte(content), 0o600))
	return path
}

func TestLoadConfigReadsYAMLAndJSONAlike(t *testing.T) {
	t.Parallel()
	fromYAML, err := mcp.LoadConfig(writeConfig(t, "mcp.yaml", exampleYAML))
	require.NoError(t, err)
	fromJSON, err := mcp.LoadConfig(writeConfig(t, "mcp.json", exampleJSON))
	require.NoError(t, err)

	assert.Equal(t, fromJSON, fromYAML)
	require.Len(t, fromYAML.Servers, 2)
	refund := fromYAML.Servers[0].Tools["refund"]
	assert.Equal(t, mcp.ToolConfig{
		Class:       tools.ClassExternal,
		Approval:    mcp.Approval{Rule: "above", Field: "amount_cents", Above: 10000},
		Retention:   mcp.Duration(720 * time.Hour),
		Timeout:     mcp.Duration(90 * time.Second),
		PairedRead:  mcp.PairedRead{Tool: "find_refund"},
		Idempotent:  true,
		KeyLifetime: mcp.Duration(24 * time.Hour),
	}, refund)
	assert.Equal(t, "amount_cents above 10000", refund.Approval.String())
	files := fromYAML.Servers[1]
	assert.Equal(t, []string{"--root", "/srv/shared"}, files.Args)
	assert.True(t, files.Optional)
	assert.Equal(t, mcp.UnlistedApprove, files.Unlisted)
	assert.Equal(t, "always", files.Tools["delete_file"].Approval.Rule)
}

func TestLoadConfigRefusesABadFileNamingWhatIsWrongAndWhere(t *testing.T) {
	t.Parallel()
	const server = "servers:\n  - name: pay\n    transport: http\n    url: http://127.0.0.1:1/mcp\n"
	tests := []struct {
		name, file, content, want string
	}{
		{"yaml unknown field", "mcp.yaml", server + "    tools:\n      refund: {clas: read}\n",
			"servers[0].tools.refund.clas: unknown field"},
		{"json unknown field", "mcp.json", `{"servers":[{"name":"pay","transport":"http","url":"http://x/mcp","tols":{}}]}`,
			"servers[0].tols: unknown field"},
		{"top-level unknown field", "mcp.yml", "server: []\n", "server: unknown field"},
		{"bad class", "mcp.yaml", server + "    tools:\n      refund: {class: write}\n",
			`server pay: tool "refund": class "write": want read or external`},
		{"class of our database", "mcp.yaml", server + "    tools:\n      refund: {class: keyed}\n",
			`server pay: tool "refund": class "keyed": an MCP tool's effect happens outside our database`},
		{"bad approval", "mcp.yaml", server + "    tools:\n      refund: {approval: sometimes}\n",
			`servers[0].tools.refund.approval: approval "sometimes": want "never", "always" or {"field": ..., "above": ...}`},
		{"approval without threshold", "mcp.yaml", server + "    tools:\n      refund: {approval: {field: amount_cents}}\n",
			`servers[0].tools.refund.approval: approval: an object rule needs both "field" and "above"`},
		{"bad duration", "mcp.yaml", server + "    tools:\n      refund: {retention: 30d}\n",
			`servers[0].tools.refund.retention: duration "30d": want a Go duration such as "90s" or "720h"`},
		{"wrong type", "mcp.json", `{"servers":[{"name":"pay","transport":"http","url":"http://x/mcp","optional":"yes"}]}`,
			"servers[0].optional: "},
		{"paired read not a read", "mcp.yaml", server + "    tools:\n      refund: {paired_read: find}\n      find: {class: external}\n",
			`server pay: tool "refund": paired_read "find": its class is external, a paired read must be read`},
		{"bad edit rule", "mcp.yaml", server + "    tools:\n      refund: {edits: sometimes}\n",
			`server pay: tool "refund": edits "sometimes": want allowed, forbidden or no_increase`},
		{"no increase without amounts", "mcp.yaml", server + "    tools:\n      refund: {edits: no_increase}\n",
			`server pay: tool "refund": edits no_increase: name the amounts that may not grow`},
		{"key lifetime without idempotent", "mcp.yaml", server + "    tools:\n      refund: {key_lifetime: 1h}\n",
			`server pay: tool "refund": key_lifetime: set only for a tool whose server honours the key (idempotent: true)`},
		{"stdio without command", "mcp.yaml", "servers:\n  - {name: local, transport: stdio, unlisted: approve}\n",
			"server local: command: a stdio server needs the program to run"},
		{"bad server name", "mcp.yaml", "servers:\n  - {name: Pay-1, transport: http, url: 'http://x/mcp', unlisted: approve}\n",
			`server Pay-1: name "Pay-1": want lower-case letters, digits and underscores`},
		{"duplicate server", "mcp.yaml", "servers:\n  - {name: pay, transport: http, url: 'http://x/mcp', unlisted: approve}\n" +
			"  - {name: pay, transport: http, url: 'http://y/mcp', unlisted: approve}\n",
			"server pay: name: also the name of servers[0]"},
		{"a URL that is not http, its password hidden", "mcp.yaml", "servers:\n  - {name: pay, transport: http, url: 'ftp://u:s3cret@h/mcp', unlisted: approve}\n",
			`server pay: url "ftp://u:xxxxx@h/mcp": an http server needs an http or https URL`},
		{"bad transport", "mcp.yaml", "servers:\n  - {name: pay, transport: sse, unlisted: approve}\n",
			`server pay: transport "sse": want "http" or "stdio"`},
		{"nothing exposed", "mcp.yaml", server, "server pay: tools: no tool is listed and unlisted tools are refused"},
		{"no servers", "mcp.yaml", "", "servers: no server is configured"},
		{"unknown extension", "mcp.toml", "", `unknown file type ".toml": name it .json, .yaml or .yml`},
		{"yaml syntax", "mcp.yaml", "servers: [\n", "yaml: "},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			path := writeConfig(t, tt.file, tt.content)
			_, err := mcp.LoadConfig(path)
			require.Error(t, err)
			assert.Contains(t, err.Error(), "mcp config "+path+": ")
			assert.Contains(t, err.Error(), tt.want)
		})
	}
}

func TestValidateReportsEveryProblemAtOnce(t *testing.T) {
	t.Parallel()
	cfg := mcp.Config{Servers: []mcp.ServerConfig{
		{Name: "pay", Transport: mcp.TransportHTTP, Tools: map[string]mcp.ToolConfig{"refund": {Class: "write"}}},
	}}
	err := cfg.Validate()
	require.Error(t, err)
	assert.Contains(t, err.Error(), `server pay: url "": an http server needs an http or https URL`)
	assert.Contains(t, err.Error(), `server pay: tool "refund": class "write"`)
}

// A file's decoding problems are named all at once, each by its path, as
// its validation problems are; the file is not half-read.
func TestLoadConfigNamesEveryDecodingProblemAtOnce(t *testing.T) {
	t.Parallel()
	path := writeConfig(t, "mcp.yaml", `servers:
  - name: pay
    transport: http
    url: http://127.0.0.1:1/mcp
    optinal: true
    tools:
      refund: {clas: read, approval: sometimes}
  - name: files
    transport: stdio
    command: /bin/files
    args: [--root, 7]
    optional: yes-please
`)
	_, err := mcp.LoadConfig(path)
	require.Error(t, err)
	for _, want := range []string{
		"servers[0].optinal: unknown field",
		"servers[0].tools.refund.clas: unknown field",
		`servers[0].tools.refund.approval: approval "sometimes"`,
		"servers[1].optional: got string, want bool",
	} {
		assert.Contains(t, err.Error(), want)
	}
}

// Every configuration docs/mcp.md shows loads as it is written.
func TestTheDocsConfigurationsLoad(t *testing.T) {
	t.Parallel()
	doc, err := os.ReadFile("../../docs/mcp.md")
	require.NoError(t, err)
	blocks := regexp.MustCompile("(?s)```yaml\n(.*?)```").FindAllSubmatch(doc, -1)
	require.GreaterOrEqual(t, len(blocks), 2, "the configuration and the questions' configuration")
	for i, b := range blocks {
		_, err := mcp.LoadConfig(writeConfig(t, "mcp.yaml", string(b[1])))
		require.NoError(t, err, "block %d of docs/mcp.md:\n%s", i+1, b[1])
	}
}
