package mail_test

import (
	"crypto/tls"
	"crypto/x509"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/oncerun/oncerun/internal/mail"
	"github.com/oncerun/oncerun/internal/mail/mailtest"
	"github.com/oncerun/oncerun/internal/testcerts"
)

func TestSendUsesStartTLSWhenOffered(t *testing.T) {
	t.Parallel()
	cert, roots := selfSigned(t)
	srv, c := setup(t,
		mailtest.Config{TLSConfig: &tls.Config{Certificates: []tls.Certificate{cert}}, Username: "agent", Password: "s3cret"},
		mail.Config{TLSConfig: &tls.Config{RootCAs: roots}, Username: "agent", Password: "s3cret"})

	_, err := c.Send(t.Context(), message("step"))

	require.NoError(t, err)
	got := srv.Messages()
	require.Len(t, got, 1)
	require.True(t, got[0].TLS, "message came over plaintext")
}

func TestSendTLSHandshakeFailureIsNotSent(t *testing.T) {
	t.Parallel()
	cert, _ := selfSigned(t)
	// The client trusts only the system roots, which never signed cert.
	srv, c := setup(t,
		mailtest.Config{TLSConfig: &tls.Config{Certificates: []tls.Certificate{cert}}},
		mail.Config{})

	_, err := c.Send(t.Context(), message("step"))

	require.ErrorIs(t, err, mail.ErrNotSent)
	var verr *tls.CertificateVerificationError
	require.ErrorAs(t, err, &verr)
	require.Empty(t, srv.Messages())
}

// selfSigned returns a certificate for 127.0.0.1 and a pool that trusts it.
func selfSigned(t *testing.T) (tls.Certificate, *x509.CertPool) {
	t.Helper()
	ca := testcerts.NewCA(t, "mailtest CA")
	return ca.Server(t, "127.0.0.1").TLS, ca.Pool
}
