package temporalconn

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/BurntSushi/toml"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/contrib/envconfig"
)

// The variables Load reads, as the temporal CLI names them.
const (
	EnvAddress                    = "TEMPORAL_ADDRESS"
	EnvNamespace                  = "TEMPORAL_NAMESPACE"
	EnvAPIKey                     = "TEMPORAL_API_KEY"
	EnvTLS                        = "TEMPORAL_TLS"
	EnvTLSClientCertPath          = "TEMPORAL_TLS_CLIENT_CERT_PATH"
	EnvTLSClientCertData          = "TEMPORAL_TLS_CLIENT_CERT_DATA"
	EnvTLSClientKeyPath           = "TEMPORAL_TLS_CLIENT_KEY_PATH"
	EnvTLSClientKeyData           = "TEMPORAL_TLS_CLIENT_KEY_DATA"
	EnvTLSServerCACertPath        = "TEMPORAL_TLS_SERVER_CA_CERT_PATH"
	EnvTLSServerCACertData        = "TEMPORAL_TLS_SERVER_CA_CERT_DATA"
	EnvTLSServerName              = "TEMPORAL_TLS_SERVER_NAME"
	EnvTLSDisableHostVerification = "TEMPORAL_TLS_DISABLE_HOST_VERIFICATION"
	EnvClientAuthority            = "TEMPORAL_CLIENT_AUTHORITY"
	EnvProfile                    = "TEMPORAL_PROFILE"
	EnvConfigFile                 = "TEMPORAL_CONFIG_FILE"
	// EnvGRPCMetaPrefix starts the name of each gRPC header variable:
	// TEMPORAL_GRPC_META_X_TENANT=acme sends x-tenant: acme.
	EnvGRPCMetaPrefix = "TEMPORAL_GRPC_META_"
)

// Names lists every variable Load reads, but the TEMPORAL_GRPC_META_ ones.
var Names = []string{
	EnvAddress, EnvNamespace, EnvAPIKey, EnvTLS, EnvTLSClientCertPath, EnvTLSClientCertData,
	EnvTLSClientKeyPath, EnvTLSClientKeyData, EnvTLSServerCACertPath, EnvTLSServerCACertData,
	EnvTLSServerName, EnvTLSDisableHostVerification, EnvClientAuthority, EnvProfile, EnvConfigFile,
}

// Load returns the Temporal client's options that getenv (os.Getenv in
// main) and the TOML profile describe, as the temporal CLI reads them:
// HostPort, Namespace (both empty when nothing names them), the API key as
// credentials, TLS, and gRPC headers. A variable set to the empty string
// counts as unset. The gRPC header variables are found by name in the
// process environment and read through getenv.
//
// Every certificate and key is loaded here: one that is missing or does not
// parse is an error naming its variable, or its field of the profile, and
// its path. An API key or PEM data never appears in an error.
func Load(getenv func(string) string) (client.Options, error) {
	lookup := envLookup(getenv)
	src := newSources(getenv)
	prof, err := envconfig.LoadClientConfigProfile(envconfig.LoadClientConfigProfileOptions{DisableEnv: true, EnvLookup: lookup})
	if err != nil {
		return client.Options{}, fmt.Errorf("temporal client profile %q of %s (%s, %s): %w", src.profile, src.file, EnvProfile, EnvConfigFile, tomlError(err))
	}
	for _, name := range []string{EnvTLS, EnvTLSDisableHostVerification} {
		if v := getenv(name); v != "" && !isBool(v) {
			return client.Options{}, fmt.Errorf("%s %q: want true or false", name, v)
		}
	}
	if prof.TLS != nil {
		t := *prof.TLS // ApplyEnvVars writes through the pointer
		prof.TLS = &t
	}
	if err := prof.ApplyEnvVars(lookup); err != nil {
		return client.Options{}, fmt.Errorf("temporal client variables: %w", err)
	}
	if err := checkTLS(prof.TLS, src); err != nil {
		return client.Options{}, err
	}
	opts, err := prof.ToClientOptions(envconfig.ToClientOptionsRequest{})
	if err != nil {
		// checkTLS has named every problem of a file; what is left is a
		// combination (a path and data for the same thing).
		return client.Options{}, fmt.Errorf("temporal client TLS (%s*): %w", "TEMPORAL_TLS_", err)
	}
	if err := CheckAddress(opts.HostPort, AddressSource(getenv)); err != nil {
		return client.Options{}, err
	}
	return opts, nil
}

// ErrAddressUserinfo is the refusal of a Temporal address that holds a
// user (and maybe a password) before an @.
var ErrAddressUserinfo = errors.New("a Temporal address is host:port, without a user or password")

// CheckAddress refuses a Temporal address that holds user-info
// (user:password@host:7233): Temporal authenticates by API key or client
// certificate, never by credentials in the address, and an address is
// shown in errors and logs. source names where the address was set. The
// error shows the address with its password hidden (untrusted.Redact).
func CheckAddress(hostPort, source string) error {
	if !strings.Contains(hostPort, "@") {
		return nil
	}
	// Everything before the last '@' may be a secret (user:password, or
	// an API key alone): none of it is shown.
	host := hostPort[strings.LastIndex(hostPort, "@")+1:]
	return fmt.Errorf("%s holds a user or password (xxxxx@%s): %w; authenticate with %s or a client certificate (%s*)",
		source, host, ErrAddressUserinfo, EnvAPIKey, "TEMPORAL_TLS_")
}

// tomlError is err without the text a TOML parse error quotes from the
// file, which may be part of an API key: only the line and the key where
// parsing stopped are kept.
func tomlError(err error) error {
	var pe toml.ParseError
	if !errors.As(err, &pe) {
		return err
	}
	where := fmt.Sprintf("line %d", pe.Position.Line)
	if pe.LastKey != "" {
		where += " (after " + pe.LastKey + ")"
	}
	return fmt.Errorf("not valid TOML at %s", where)
}

func isBool(v string) bool {
	switch strings.ToLower(v) {
	case "1", "0", "true", "false":
		return true
	}
	return false
}

// sources names where a setting came from: its variable when that is set,
// otherwise its field of the profile.
type sources struct {
	getenv        func(string) string
	profile, file string
}

func newSources(getenv func(string) string) sources {
	src := sources{getenv: getenv, profile: getenv(EnvProfile), file: getenv(EnvConfigFile)}
	if src.profile == "" {
		src.profile = envconfig.DefaultConfigFileProfile
	}
	if src.file == "" {
		src.file = envconfig.DefaultConfigFilePath()
	}
	return src
}

// AddressSource says where the address Load reads comes from: its
// variable when that is set, otherwise the profile and its file.
func AddressSource(getenv func(string) string) string {
	if getenv(EnvAddress) != "" {
		return EnvAddress
	}
	src := newSources(getenv)
	return fmt.Sprintf("profile %q in %s", src.profile, src.file)
}

func (s sources) name(env, field string) string {
	if s.getenv(env) != "" {
		return env
	}
	return fmt.Sprintf("tls.%s of profile %q in %s", field, s.profile, s.file)
}

// checkTLS loads each certificate and key t names, so that one that does
// not load is an error naming where it was set and its path.
func checkTLS(t *envconfig.ClientConfigTLS, src sources) error {
	if t == nil || t.Disabled {
		return nil
	}
	certName := src.name(EnvTLSClientCertPath, "client_cert_path")
	keyName := src.name(EnvTLSClientKeyPath, "client_key_path")
	var certPEM, keyPEM []byte
	var err error
	if t.ClientCertPath != "" {
		if certPEM, err = readPEM(certName, t.ClientCertPath); err != nil {
			return err
		}
	}
	if t.ClientKeyPath != "" {
		if keyPEM, err = readPEM(keyName, t.ClientKeyPath); err != nil {
			return err
		}
	}
	switch {
	case t.ClientCertPath != "" && t.ClientKeyPath == "" && len(t.ClientKeyData) == 0:
		return fmt.Errorf("%s %s is set but no client key: set %s too", certName, t.ClientCertPath, EnvTLSClientKeyPath)
	case t.ClientKeyPath != "" && t.ClientCertPath == "" && len(t.ClientCertData) == 0:
		return fmt.Errorf("%s %s is set but no client certificate: set %s too", keyName, t.ClientKeyPath, EnvTLSClientCertPath)
	case len(t.ClientCertData) > 0 && len(t.ClientKeyData) == 0 && t.ClientKeyPath == "":
		return fmt.Errorf("%s is set but no client key: set %s too", src.name(EnvTLSClientCertData, "client_cert_data"), EnvTLSClientKeyData)
	case len(t.ClientKeyData) > 0 && len(t.ClientCertData) == 0 && t.ClientCertPath == "":
		return fmt.Errorf("%s is set but no client certificate: set %s too", src.name(EnvTLSClientKeyData, "client_key_data"), EnvTLSClientCertData)
	}
	if len(t.ClientCertData) > 0 {
		certPEM, certName = t.ClientCertData, src.name(EnvTLSClientCertData, "client_cert_data")
	} else if t.ClientCertPath != "" {
		certName += " " + t.ClientCertPath
	}
	if len(t.ClientKeyData) > 0 {
		keyPEM, keyName = t.ClientKeyData, src.name(EnvTLSClientKeyData, "client_key_data")
	} else if t.ClientKeyPath != "" {
		keyName += " " + t.ClientKeyPath
	}
	if len(certPEM) > 0 {
		if _, err := tls.X509KeyPair(certPEM, keyPEM); err != nil {
			// The error names what failed, never the PEM it read.
			return fmt.Errorf("client certificate %s and key %s do not load as a pair: %w", certName, keyName, err)
		}
	}
	caPEM, caName := t.ServerCACertData, src.name(EnvTLSServerCACertData, "server_ca_cert_data")
	if t.ServerCACertPath != "" && len(caPEM) == 0 {
		caName = src.name(EnvTLSServerCACertPath, "server_ca_cert_path")
		if caPEM, err = readPEM(caName, t.ServerCACertPath); err != nil {
			return err
		}
		caName += " " + t.ServerCACertPath
	}
	if len(caPEM) > 0 && !x509.NewCertPool().AppendCertsFromPEM(caPEM) {
		return fmt.Errorf("server CA %s holds no PEM certificate", caName)
	}
	return nil
}

// readPEM reads the file at path that name (a variable, or a profile's
// field) names.
func readPEM(name, path string) ([]byte, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		var pe *os.PathError
		if errors.As(err, &pe) {
			err = pe.Err // the path is said once, beside its name
		}
		return nil, fmt.Errorf("%s %s: %w", name, path, err)
	}
	return b, nil
}

// envLookup reads the environment through getenv, for envconfig.
type envLookup func(string) string

// LookupEnv reports a variable set to the empty string as unset, as the
// rest of oncerun's configuration does.
func (e envLookup) LookupEnv(name string) (string, bool) {
	v := e(name)
	return v, v != ""
}

// Environ lists the gRPC header variables of the process environment, with
// their values as getenv reads them.
func (e envLookup) Environ() []string {
	var out []string
	for _, kv := range os.Environ() {
		name, _, _ := strings.Cut(kv, "=")
		if v := e(name); strings.HasPrefix(name, EnvGRPCMetaPrefix) && v != "" {
			out = append(out, name+"="+v)
		}
	}
	return out
}
