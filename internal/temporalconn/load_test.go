package temporalconn_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/oncerun/oncerun/internal/temporalconn"
	"github.com/oncerun/oncerun/internal/testcerts"
)

// env is an environment of a test. TEMPORAL_CONFIG_FILE points at a file
// that does not exist unless the test sets it, so that no temporal.toml of
// the machine's user is read.
func env(t *testing.T, kv map[string]string) func(string) string {
	t.Helper()
	m := map[string]string{temporalconn.EnvConfigFile: filepath.Join(t.TempDir(), "none.toml")}
	for k, v := range kv {
		m[k] = v
	}
	return func(k string) string { return m[k] }
}

func TestLoadWithNothingSetIsPlainAndEmpty(t *testing.T) {
	t.Parallel()
	opts, err := temporalconn.Load(env(t, nil))
	require.NoError(t, err)
	assert.Empty(t, opts.HostPort, "the caller's default applies")
	assert.Empty(t, opts.Namespace)
	assert.Nil(t, opts.ConnectionOptions.TLS)
	assert.Nil(t, opts.Credentials)
}

func TestLoadReadsTheTemporalCLIsVariables(t *testing.T) {
	t.Parallel()
	ca := testcerts.NewCA(t, "test CA")
	client := ca.Client(t, "worker")
	opts, err := temporalconn.Load(env(t, map[string]string{
		temporalconn.EnvAddress:             "temporal.example:7233",
		temporalconn.EnvNamespace:           "prod",
		temporalconn.EnvTLSClientCertPath:   client.CertPath,
		temporalconn.EnvTLSClientKeyPath:    client.KeyPath,
		temporalconn.EnvTLSServerCACertPath: ca.CertPath,
		temporalconn.EnvTLSServerName:       "frontend.example",
	}))
	require.NoError(t, err)
	assert.Equal(t, "temporal.example:7233", opts.HostPort)
	assert.Equal(t, "prod", opts.Namespace)
	tls := opts.ConnectionOptions.TLS
	require.NotNil(t, tls)
	assert.Len(t, tls.Certificates, 1, "the client certificate is loaded")
	assert.NotNil(t, tls.RootCAs, "the server CA is loaded")
	assert.Equal(t, "frontend.example", tls.ServerName)
	assert.Nil(t, opts.Credentials)
	assert.Equal(t, "temporal.example:7233, namespace prod, TLS with a client certificate", temporalconn.Describe(opts))
}

func TestLoadAnAPIKeyTurnsTLSOnAndIsNeverDescribed(t *testing.T) {
	t.Parallel()
	const key = "sk-very-secret-api-key"
	opts, err := temporalconn.Load(env(t, map[string]string{
		temporalconn.EnvAddress: "ns.acct.tmprl.cloud:7233", temporalconn.EnvNamespace: "ns.acct", temporalconn.EnvAPIKey: key,
	}))
	require.NoError(t, err)
	assert.NotNil(t, opts.Credentials)
	assert.NotNil(t, opts.ConnectionOptions.TLS, "an API key goes over TLS, as Temporal Cloud takes it")
	d := temporalconn.Describe(opts)
	assert.Equal(t, "ns.acct.tmprl.cloud:7233, namespace ns.acct, TLS, API key", d)
	assert.NotContains(t, d, key)
}

func TestLoadReadsAProfileOfTheTOMLFileAndVariablesOverrideIt(t *testing.T) {
	t.Parallel()
	file := filepath.Join(t.TempDir(), "temporal.toml")
	require.NoError(t, os.WriteFile(file, []byte(`
[profile.default]
address = "default.example:7233"

[profile.prod]
address = "prod.example:7233"
namespace = "prod-ns"
api_key = "from-the-file"
[profile.prod.grpc_meta]
x-team = "payments"
`), 0o600))
	getenv := env(t, map[string]string{temporalconn.EnvConfigFile: file, temporalconn.EnvProfile: "prod"})
	opts, err := temporalconn.Load(getenv)
	require.NoError(t, err)
	assert.Equal(t, "prod.example:7233", opts.HostPort)
	assert.Equal(t, "prod-ns", opts.Namespace)
	assert.NotNil(t, opts.Credentials)
	require.NotNil(t, opts.HeadersProvider, "the profile's gRPC metadata is sent")
	h, err := opts.HeadersProvider.GetHeaders(t.Context())
	require.NoError(t, err)
	assert.Equal(t, "payments", h["x-team"])

	opts, err = temporalconn.Load(env(t, map[string]string{temporalconn.EnvConfigFile: file, temporalconn.EnvProfile: "prod",
		temporalconn.EnvAddress: "override.example:7233"}))
	require.NoError(t, err)
	assert.Equal(t, "override.example:7233", opts.HostPort, "a variable wins over the profile")
	assert.Equal(t, "prod-ns", opts.Namespace)

	_, err = temporalconn.Load(env(t, map[string]string{temporalconn.EnvConfigFile: file, temporalconn.EnvProfile: "staging"}))
	require.Error(t, err)
	assert.ErrorContains(t, err, `"staging"`)
	assert.ErrorContains(t, err, temporalconn.EnvProfile)
}

// A certificate, a key or a CA that does not load is an error at start
// naming its variable (or the profile's field) and its path.
func TestLoadNamesTheVariableAndPathOfWhatDoesNotLoad(t *testing.T) {
	t.Parallel()
	ca := testcerts.NewCA(t, "test CA")
	client := ca.Client(t, "worker")
	other := testcerts.NewCA(t, "other CA").Client(t, "worker")
	missing := filepath.Join(t.TempDir(), "missing.pem")
	garbage := filepath.Join(t.TempDir(), "garbage.pem")
	require.NoError(t, os.WriteFile(garbage, []byte("not a certificate"), 0o600))
	cases := []struct {
		name string
		vars map[string]string
		want []string
	}{
		{"missing certificate", map[string]string{temporalconn.EnvTLSClientCertPath: missing, temporalconn.EnvTLSClientKeyPath: client.KeyPath},
			[]string{temporalconn.EnvTLSClientCertPath, missing, "no such file"}},
		{"missing key", map[string]string{temporalconn.EnvTLSClientCertPath: client.CertPath, temporalconn.EnvTLSClientKeyPath: missing},
			[]string{temporalconn.EnvTLSClientKeyPath, missing}},
		{"certificate without key", map[string]string{temporalconn.EnvTLSClientCertPath: client.CertPath},
			[]string{temporalconn.EnvTLSClientCertPath, client.CertPath, temporalconn.EnvTLSClientKeyPath}},
		{"key without certificate", map[string]string{temporalconn.EnvTLSClientKeyPath: client.KeyPath},
			[]string{temporalconn.EnvTLSClientKeyPath, temporalconn.EnvTLSClientCertPath}},
		{"key of another certificate", map[string]string{temporalconn.EnvTLSClientCertPath: client.CertPath, temporalconn.EnvTLSClientKeyPath: other.KeyPath},
			[]string{client.CertPath, other.KeyPath, "do not load as a pair"}},
		{"garbage certificate", map[string]string{temporalconn.EnvTLSClientCertPath: garbage, temporalconn.EnvTLSClientKeyPath: client.KeyPath},
			[]string{temporalconn.EnvTLSClientCertPath, garbage}},
		{"missing CA", map[string]string{temporalconn.EnvTLS: "true", temporalconn.EnvTLSServerCACertPath: missing},
			[]string{temporalconn.EnvTLSServerCACertPath, missing}},
		{"CA without a certificate", map[string]string{temporalconn.EnvTLSServerCACertPath: garbage},
			[]string{temporalconn.EnvTLSServerCACertPath, garbage, "no PEM certificate"}},
		{"TLS not a boolean", map[string]string{temporalconn.EnvTLS: "yes"},
			[]string{temporalconn.EnvTLS, `"yes"`}},
		{"host verification not a boolean", map[string]string{temporalconn.EnvTLSDisableHostVerification: "off"},
			[]string{temporalconn.EnvTLSDisableHostVerification}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			_, err := temporalconn.Load(env(t, c.vars))
			require.Error(t, err)
			for _, w := range c.want {
				assert.ErrorContains(t, err, w)
			}
		})
	}
}

func TestLoadNamesTheProfileFieldOfAFileThatDoesNotLoad(t *testing.T) {
	t.Parallel()
	missing := filepath.Join(t.TempDir(), "missing-ca.pem")
	file := filepath.Join(t.TempDir(), "temporal.toml")
	require.NoError(t, os.WriteFile(file, []byte("[profile.default.tls]\nserver_ca_cert_path = \""+missing+"\"\n"), 0o600))
	_, err := temporalconn.Load(env(t, map[string]string{temporalconn.EnvConfigFile: file}))
	require.Error(t, err)
	assert.ErrorContains(t, err, `tls.server_ca_cert_path of profile "default" in `+file)
	assert.ErrorContains(t, err, missing)
}

// PEM data given in a variable is a secret (a private key): an error about
// it names the variable, never its content.
func TestLoadNeverPrintsKeyData(t *testing.T) {
	t.Parallel()
	ca := testcerts.NewCA(t, "test CA")
	client := ca.Client(t, "worker")
	other := testcerts.NewCA(t, "other CA").Client(t, "worker")
	cert, err := os.ReadFile(client.CertPath)
	require.NoError(t, err)
	wrongKey, err := os.ReadFile(other.KeyPath)
	require.NoError(t, err)
	_, err = temporalconn.Load(env(t, map[string]string{
		temporalconn.EnvTLSClientCertData: string(cert), temporalconn.EnvTLSClientKeyData: string(wrongKey),
	}))
	require.Error(t, err)
	assert.ErrorContains(t, err, temporalconn.EnvTLSClientKeyData)
	body := strings.Split(strings.TrimSpace(string(wrongKey)), "\n")[1]
	assert.NotContains(t, err.Error(), body, "no line of the key is printed")

	good, err := os.ReadFile(client.KeyPath)
	require.NoError(t, err)
	opts, err := temporalconn.Load(env(t, map[string]string{
		temporalconn.EnvTLSClientCertData: string(cert), temporalconn.EnvTLSClientKeyData: string(good),
	}))
	require.NoError(t, err)
	assert.Len(t, opts.ConnectionOptions.TLS.Certificates, 1)
}

// A profile file that does not parse is reported by its line, never by the
// text found there, which may be part of an API key.
func TestLoadNeverQuotesAProfileThatDoesNotParse(t *testing.T) {
	t.Parallel()
	file := filepath.Join(t.TempDir(), "temporal.toml")
	require.NoError(t, os.WriteFile(file, []byte("[profile.default]\naddress = \"x:7233\"\napi_key = secretkeywithoutquotes\n"), 0o600))
	_, err := temporalconn.Load(env(t, map[string]string{temporalconn.EnvConfigFile: file}))
	require.Error(t, err)
	assert.ErrorContains(t, err, file)
	assert.ErrorContains(t, err, "not valid TOML at line 3")
	assert.NotContains(t, err.Error(), "secret")
}

func TestAddressSourceNamesTheVariableOrTheProfile(t *testing.T) {
	t.Parallel()
	assert.Equal(t, "TEMPORAL_ADDRESS", temporalconn.AddressSource(env(t, map[string]string{temporalconn.EnvAddress: "x:7233"})))
	getenv := env(t, map[string]string{temporalconn.EnvProfile: "prod"})
	assert.Equal(t, `profile "prod" in `+getenv(temporalconn.EnvConfigFile), temporalconn.AddressSource(getenv))
}

// An address with user-info is refused, and the refusal names where it was
// set without the password: a Temporal address carries no credentials.
func TestLoadRefusesAnAddressWithAUserAndPasswordWithoutShowingIt(t *testing.T) {
	t.Parallel()
	for _, addr := range []string{"ops:s3cret@temporal.example:7233", "http://ops:s3cret@temporal.example:7233", "s3cret@temporal.example:7233"} {
		_, err := temporalconn.Load(env(t, map[string]string{temporalconn.EnvAddress: addr}))
		require.ErrorIs(t, err, temporalconn.ErrAddressUserinfo, addr)
		assert.ErrorContains(t, err, "TEMPORAL_ADDRESS holds a user or password")
		assert.ErrorContains(t, err, "(xxxxx@temporal.example:7233)")
		assert.NotContains(t, err.Error(), "s3cret", "an API key alone before the @ is not shown either")
		assert.NotContains(t, err.Error(), "ops", "nor the user")
	}
}
