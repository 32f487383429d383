// Package testcerts makes certificate authorities and the certificates
// they sign, as PEM files in a test's directory, for the tests of TLS and
// mutual TLS against real servers.
package testcerts

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// CA is a certificate authority of a test.
type CA struct {
	// CertPath is its certificate, PEM.
	CertPath string
	// Pool holds its certificate.
	Pool *x509.CertPool
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	dir  string
}

// Pair is a certificate and its key, as files and as loaded.
type Pair struct {
	CertPath, KeyPath string
	TLS               tls.Certificate
}

// NewCA makes a certificate authority named name, valid for a day, its
// files in a new directory of t's.
func NewCA(t testing.TB, name string) *CA {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	tmpl := &x509.Certificate{
		SerialNumber:          serial(t),
		Subject:               pkix.Name{CommonName: name},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(24 * time.Hour),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	require.NoError(t, err)
	cert, err := x509.ParseCertificate(der)
	require.NoError(t, err)
	ca := &CA{cert: cert, key: key, dir: t.TempDir(), Pool: x509.NewCertPool()}
	ca.Pool.AddCert(cert)
	ca.CertPath = filepath.Join(ca.dir, "ca.pem")
	writePEM(t, ca.CertPath, "CERTIFICATE", der)
	return ca
}

// Server issues a server certificate for hosts (names or IP addresses).
func (ca *CA) Server(t testing.TB, hosts ...string) Pair {
	t.Helper()
	tmpl := &x509.Certificate{Subject: pkix.Name{CommonName: hosts[0]}, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	for _, h := range hosts {
		if ip := net.ParseIP(h); ip != nil {
			tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
		} else {
			tmpl.DNSNames = append(tmpl.DNSNames, h)
		}
	}
	return ca.issue(t, "server-"+hosts[0], tmpl)
}

// Client issues a client certificate whose common name is name.
func (ca *CA) Client(t testing.TB, name string) Pair {
	t.Helper()
	tmpl := &x509.Certificate{Subject: pkix.Name{CommonName: name}, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}
	return ca.issue(t, "client-"+name, tmpl)
}

func (ca *CA) issue(t testing.TB, file string, tmpl *x509.Certificate) Pair {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	tmpl.SerialNumber = serial(t)
	tmpl.NotBefore, tmpl.NotAfter = time.Now().Add(-time.Hour), time.Now().Add(24*time.Hour)
	tmpl.KeyUsage = x509.KeyUsageDigitalSignature
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	require.NoError(t, err)
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	require.NoError(t, err)
	p := Pair{CertPath: filepath.Join(ca.dir, file+".pem"), KeyPath: filepath.Join(ca.dir, file+"-key.pem")}
	writePEM(t, p.CertPath, "CERTIFICATE", der)
	writePEM(t, p.KeyPath, "PRIVATE KEY", keyDER)
	p.TLS, err = tls.LoadX509KeyPair(p.CertPath, p.KeyPath)
	require.NoError(t, err)
	return p
}

func serial(t testing.TB) *big.Int {
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 62))
	require.NoError(t, err)
	return n
}

func writePEM(t testing.TB, path, typ string, der []byte) {
	t.Helper()
	require.NoError(t, os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600))
}
