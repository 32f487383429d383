package mail_test

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"math/big"
	"net"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/oncerun/oncerun/internal/mail"
	"github.com/oncerun/oncerun/internal/mail/mailtest"
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
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "mailtest"},
		IPAddresses:           []net.IP{net.IPv4(127, 0, 0, 1)},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(time.Hour),
		KeyUsage:              x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	require.NoError(t, err)
	leaf, err := x509.ParseCertificate(der)
	require.NoError(t, err)
	roots := x509.NewCertPool()
	roots.AddCert(leaf)
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key, Leaf: leaf}, roots
}
