// Package testcerts makes a throwaway certificate authority and certificates
// signed by it, written as PEM files into a test's temp dir, so TLS tests need
// no checked-in keys that would expire or leak. Every certificate is ECDSA
// P-256, valid for an hour, for 127.0.0.1 and localhost, and good for both
// server and client authentication (one certificate can serve either end).
//
//	ca := testcerts.NewCA(t)
//	srv := ca.Issue(t, "streamer")   // srv.Cert, srv.Key: file paths
//	// rowlift streamer --tls-cert srv.Cert --tls-key srv.Key --tls-ca ca.Cert
package testcerts

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
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

// CA is a certificate authority whose certificate is at Cert (PEM).
type CA struct {
	// Cert is the path of the CA certificate, what --tls-ca takes.
	Cert string
	dir  string
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
}

// Pair is a certificate and its key as PEM files, what --tls-cert and
// --tls-key take.
type Pair struct {
	Cert, Key string
}

// NewCA makes a CA in a new temp dir of t.
func NewCA(t testing.TB) *CA {
	t.Helper()
	key := newKey(t)
	tmpl := template(t, "")
	// Unique, as CAs in production are: a client tells the CAs a server accepts by name.
	tmpl.Subject.CommonName = "rowlift test CA " + tmpl.SerialNumber.String()
	tmpl.IsCA = true
	tmpl.BasicConstraintsValid = true
	tmpl.KeyUsage = x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	require.NoError(t, err)
	cert, err := x509.ParseCertificate(der)
	require.NoError(t, err)
	ca := &CA{dir: t.TempDir(), cert: cert, key: key}
	ca.Cert = filepath.Join(ca.dir, "ca.crt")
	writePEM(t, ca.Cert, "CERTIFICATE", der)
	return ca
}

// Issue signs a new certificate with common name cn (also a DNS name in it,
// beside localhost and 127.0.0.1) and writes it and its key as cn.crt and
// cn.key in the CA's dir; issuing the same cn again overwrites them in place.
func (ca *CA) Issue(t testing.TB, cn string) Pair {
	t.Helper()
	key := newKey(t)
	tmpl := template(t, cn)
	tmpl.KeyUsage = x509.KeyUsageDigitalSignature
	tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}
	tmpl.DNSNames = []string{"localhost", cn}
	tmpl.IPAddresses = []net.IP{net.IPv4(127, 0, 0, 1)}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	require.NoError(t, err)
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	require.NoError(t, err)
	p := Pair{Cert: filepath.Join(ca.dir, cn+".crt"), Key: filepath.Join(ca.dir, cn+".key")}
	writePEM(t, p.Cert, "CERTIFICATE", der)
	writePEM(t, p.Key, "PRIVATE KEY", keyDER)
	return p
}

func newKey(t testing.TB) *ecdsa.PrivateKey {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	return key
}

func template(t testing.TB, cn string) *x509.Certificate {
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 62))
	require.NoError(t, err)
	return &x509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{CommonName: cn},
		NotBefore:    time.Now().Add(-time.Minute),
		NotAfter:     time.Now().Add(time.Hour),
	}
}

func writePEM(t testing.TB, path, typ string, der []byte) {
	require.NoError(t, os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600))
}
