package temporalconn_test

import (
	"crypto/tls"
	"fmt"
	"net"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/sdk/client"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/oncerun/oncerun/internal/temporalconn"
	"github.com/oncerun/oncerun/internal/testcerts"
)

// serve accepts connections on loopback until the test ends and hands each
// to handle, on a goroutine of its own, which closes it; it returns the
// address.
func serve(t *testing.T, handle func(net.Conn)) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	t.Cleanup(func() { _ = ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				handle(c)
			}()
		}
	}()
	return ln.Addr().String()
}

// tlsServer runs the server side of a TLS handshake with cfg on each
// connection, as a TLS-only Temporal frontend would before any gRPC is
// spoken.
func tlsServer(t *testing.T, cfg *tls.Config) string {
	t.Helper()
	cfg.NextProtos = []string{"h2"} // as gRPC needs
	return serve(t, func(c net.Conn) {
		tc := tls.Server(c, cfg)
		if tc.Handshake() == nil {
			_ = tc.SetReadDeadline(time.Now().Add(2 * time.Second))
			_, _ = tc.Read(make([]byte, 1024)) // a client that failed to verify us hangs up
		}
	})
}

// dial dials addr with the options the environment vars give, waiting up to
// a minute for a server that is not there, and returns how many times the
// dial said it would try again, and its error.
func dial(t *testing.T, addr string, vars map[string]string) (retries int, err error) {
	t.Helper()
	vars[temporalconn.EnvAddress] = addr
	opts, err := temporalconn.Load(env(t, vars))
	require.NoError(t, err)
	core, logs := observer.New(zap.WarnLevel)
	c, err := temporalconn.Dial(t.Context(), opts, time.Minute, zap.New(core))
	if c != nil {
		c.Close()
	}
	return logs.FilterMessageSnippet("not reachable yet").Len(), err
}

func TestDialFailsAtOnceWhenTheServerIsSignedByAnUnknownCA(t *testing.T) {
	t.Parallel()
	ours, theirs := testcerts.NewCA(t, "our CA"), testcerts.NewCA(t, "their CA")
	addr := tlsServer(t, &tls.Config{Certificates: []tls.Certificate{theirs.Server(t, "127.0.0.1").TLS}})
	retries, err := dial(t, addr, map[string]string{temporalconn.EnvTLSServerCACertPath: ours.CertPath})
	require.Error(t, err)
	assert.ErrorIs(t, err, temporalconn.ErrRefused)
	assert.Zero(t, retries, "a server that refuses us is not waited for")
	assert.ErrorContains(t, err, "TLS handshake with "+addr+": tls: failed to verify certificate: x509: certificate signed by unknown authority")
	assert.ErrorContains(t, err, "check TEMPORAL_TLS_*")
}

func TestDialFailsAtOnceWithoutTheClientCertificateTheServerRequires(t *testing.T) {
	t.Parallel()
	ca := testcerts.NewCA(t, "test CA")
	addr := tlsServer(t, &tls.Config{
		Certificates: []tls.Certificate{ca.Server(t, "127.0.0.1").TLS},
		ClientAuth:   tls.RequireAndVerifyClientCert, ClientCAs: ca.Pool,
	})
	retries, err := dial(t, addr, map[string]string{temporalconn.EnvTLSServerCACertPath: ca.CertPath})
	require.Error(t, err)
	assert.ErrorIs(t, err, temporalconn.ErrRefused)
	assert.Zero(t, retries)
	assert.ErrorContains(t, err, "TLS handshake with "+addr+": remote error: tls: certificate required")

	// A certificate of another CA is refused as well.
	other := testcerts.NewCA(t, "other CA").Client(t, "worker")
	retries, err = dial(t, addr, map[string]string{temporalconn.EnvTLSServerCACertPath: ca.CertPath,
		temporalconn.EnvTLSClientCertPath: other.CertPath, temporalconn.EnvTLSClientKeyPath: other.KeyPath})
	require.Error(t, err)
	assert.ErrorIs(t, err, temporalconn.ErrRefused)
	assert.Zero(t, retries)
	assert.ErrorContains(t, err, "TLS handshake with "+addr+": remote error: tls:")
}

// A plain-text client at a TLS-only server meets a closed connection, as it
// would at a load balancer with no server behind it yet: it waits, and the
// warning says what to set if the server wants TLS.
func TestDialInPlainTextAtATLSServerWaitsAndSaysToTurnTLSOn(t *testing.T) {
	t.Parallel()
	ca := testcerts.NewCA(t, "test CA")
	addr := tlsServer(t, &tls.Config{Certificates: []tls.Certificate{ca.Server(t, "127.0.0.1").TLS}})
	opts, err := temporalconn.Load(env(t, map[string]string{temporalconn.EnvAddress: addr}))
	require.NoError(t, err)
	core, logs := observer.New(zap.WarnLevel)
	_, err = temporalconn.Dial(t.Context(), opts, 3*time.Second, zap.New(core))
	require.Error(t, err)
	assert.NotErrorIs(t, err, temporalconn.ErrRefused)
	assert.ErrorContains(t, err, "if the server requires TLS, set TEMPORAL_TLS=true")
	assert.Positive(t, logs.FilterMessageSnippet("set TEMPORAL_TLS=true").Len())
}

func TestRefusalOfAnAuthorizationErrorNamesTheCredentialVariable(t *testing.T) {
	t.Parallel()
	ca := testcerts.NewCA(t, "test CA")
	cert := ca.Client(t, "worker")
	withKey, err := temporalconn.Load(env(t, map[string]string{temporalconn.EnvAddress: "t:7233", temporalconn.EnvAPIKey: "k"}))
	require.NoError(t, err)
	withCert, err := temporalconn.Load(env(t, map[string]string{temporalconn.EnvAddress: "t:7233",
		temporalconn.EnvTLSClientCertPath: cert.CertPath, temporalconn.EnvTLSClientKeyPath: cert.KeyPath}))
	require.NoError(t, err)
	plain := client.Options{HostPort: "t:7233"}
	denied := fmt.Errorf("failed reaching server: %w", serviceerror.NewPermissionDenied("Request unauthorized.", ""))
	unauthenticated := status.Error(codes.Unauthenticated, "no token")
	cases := []struct {
		opts client.Options
		err  error
		want string
	}{
		{withKey, denied, "permission denied at t:7233: Request unauthorized.; check TEMPORAL_API_KEY"},
		{withCert, denied, "check TEMPORAL_TLS_CLIENT_CERT_PATH (the server does not accept this client certificate)"},
		{plain, unauthenticated, "not authenticated at t:7233: no token; check TEMPORAL_API_KEY or TEMPORAL_TLS_CLIENT_CERT_PATH (none is set)"},
	}
	for _, c := range cases {
		err := temporalconn.Refusal(c.opts, c.err)
		require.Error(t, err, c.want)
		assert.ErrorIs(t, err, temporalconn.ErrRefused)
		assert.ErrorContains(t, err, c.want)
	}
	assert.NoError(t, temporalconn.Refusal(plain, serviceerror.NewUnavailable("connection refused")),
		"a server that is not there yet is no refusal")
	assert.NoError(t, temporalconn.Refusal(plain, serviceerror.NewNotFound("namespace x")))
}

// A TLS client at a plain-text server is refused at once, and told to
// turn TLS off.
func TestDialOverTLSAtAPlainServerSaysToTurnTLSOff(t *testing.T) {
	t.Parallel()
	addr := serve(t, func(c net.Conn) {
		// What an HTTP/2 server answers first: a SETTINGS frame.
		_, _ = c.Write([]byte{0, 0, 0, 4, 0, 0, 0, 0, 0})
		time.Sleep(100 * time.Millisecond)
	})
	retries, err := dial(t, addr, map[string]string{temporalconn.EnvTLS: "true"})
	require.Error(t, err)
	assert.ErrorIs(t, err, temporalconn.ErrRefused)
	assert.Zero(t, retries)
	assert.ErrorContains(t, err, "the server does not speak TLS: set TEMPORAL_TLS=false")
}

// closingServer accepts connections and closes each at once, as a load
// balancer with no server behind it does, or after a TLS handshake with
// cfg when cfg is set.
func closingServer(t *testing.T, cfg *tls.Config) string {
	t.Helper()
	return serve(t, func(c net.Conn) {
		if cfg != nil {
			_ = tls.Server(c, cfg).Handshake()
		}
	})
}

// A connection closed without a word is waited for over TLS as in plain
// text: it is what a load balancer with no live server behind it does.
func TestDialOverTLSWaitsForAConnectionClosedWithoutAWord(t *testing.T) {
	t.Parallel()
	ca := testcerts.NewCA(t, "test CA")
	for name, addr := range map[string]string{
		"closed before the handshake": closingServer(t, nil),
		"closed after the handshake": closingServer(t, &tls.Config{NextProtos: []string{"h2"},
			Certificates: []tls.Certificate{ca.Server(t, "127.0.0.1").TLS}}),
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			opts, err := temporalconn.Load(env(t, map[string]string{temporalconn.EnvAddress: addr,
				temporalconn.EnvTLSServerCACertPath: ca.CertPath}))
			require.NoError(t, err)
			core, logs := observer.New(zap.WarnLevel)
			_, err = temporalconn.Dial(t.Context(), opts, 3*time.Second, zap.New(core))
			require.Error(t, err)
			assert.NotErrorIs(t, err, temporalconn.ErrRefused, "no refusal: the server may only be not there yet")
			assert.Positive(t, logs.FilterMessageSnippet("not reachable yet").Len(), "it tried again")
		})
	}
}

// Dial refuses an address with user-info that did not come through Load (a
// deployment's own Config.TemporalAddress) before it sends anything, so no
// error or log line of the dial shows the password.
func TestDialRefusesAnAddressWithAPasswordAndNeverShowsIt(t *testing.T) {
	t.Parallel()
	core, logs := observer.New(zap.DebugLevel)
	_, err := temporalconn.Dial(t.Context(), client.Options{HostPort: "ops:s3cret@127.0.0.1:1"}, -1, zap.New(core))
	require.ErrorIs(t, err, temporalconn.ErrAddressUserinfo)
	assert.NotContains(t, err.Error(), "s3cret")
	assert.Zero(t, logs.Len())
}
