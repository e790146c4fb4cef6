// Package tlsfiles turns the --tls-cert, --tls-key and --tls-ca files of a
// rowlift process into TLS configurations that follow the files as they are
// rotated: the next handshake after a change uses the new certificate and CA
// (see internal/reloadfile). A server with a CA requires and verifies client
// certificates (mutual TLS); a client with a CA verifies the server with it.
package tlsfiles

import (
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/asn1"
	"errors"
	"fmt"
	"os"
	"strings"

	"go.uber.org/zap"

	"github.com/rowlift/rowlift/internal/reloadfile"
)

// Files are the paths the --tls-* flags give; empty ones are not set.
type Files struct {
	Cert, Key, CA string
}

// Enabled reports whether any flag is set: then the connection uses TLS.
func (f Files) Enabled() bool { return f.Cert != "" || f.Key != "" || f.CA != "" }

// material is what the files hold: the certificate to present (nil: none)
// and the CA to verify the peer with (nil: none given).
type material struct {
	cert *tls.Certificate
	ca   *x509.CertPool
}

// Server returns the TLS configuration of a server: it presents --tls-cert,
// and with --tls-ca requires client certificates that CA signed. Certificate
// and CA are re-read for each handshake whose files changed. Call it only
// when f.Enabled(): a server without any flag serves plaintext.
func Server(f Files, log *zap.Logger) (*tls.Config, error) {
	if f.Cert == "" && f.Key == "" {
		return nil, errors.New("--tls-ca needs --tls-cert and --tls-key: a server must present a certificate to serve TLS")
	}
	files, err := load(f, log)
	if err != nil {
		return nil, err
	}
	return &tls.Config{
		MinVersion: tls.VersionTLS12,
		// Per connection, so a rotated CA applies too (ClientCAs is fixed once a
		// config is in use); grpc-go adds its ALPN protocol to what this returns.
		GetConfigForClient: func(*tls.ClientHelloInfo) (*tls.Config, error) {
			m := files.Get()
			c := &tls.Config{MinVersion: tls.VersionTLS12, Certificates: []tls.Certificate{*m.cert}}
			if m.ca != nil {
				c.ClientAuth, c.ClientCAs = tls.RequireAndVerifyClientCert, m.ca
			}
			return c, nil
		},
	}, nil
}

// Handshake is the TLS configuration of one client handshake, and what the
// server's request for a client certificate showed.
type Handshake struct {
	Config  *tls.Config
	refusal error
}

// Refusal returns, once the handshake is done, why the server refuses this
// client's certificate when its request showed it: it asked for one and
// there is none, or it named the CAs it accepts and none issued this one.
// Under TLS 1.3 the client's handshake ends before the server checks the
// certificate, and what the client sees next depends on timing (an alert, a
// broken pipe); this says it the same way every time. The certificate is
// sent all the same, so the server logs its own reason.
func (h *Handshake) Refusal() error { return h.refusal }

// Client returns a function that gives the configuration of a client
// handshake as the files are now: it verifies the server with --tls-ca (the
// system's CAs without it) and presents --tls-cert when one is given. Call it
// for each handshake, so a rotation applies to the next connection.
func Client(f Files, log *zap.Logger) (func() *Handshake, error) {
	files, err := load(f, log)
	if err != nil {
		return nil, err
	}
	return func() *Handshake {
		m := files.Get()
		h := &Handshake{}
		h.Config = &tls.Config{MinVersion: tls.VersionTLS12, RootCAs: m.ca,
			GetClientCertificate: func(req *tls.CertificateRequestInfo) (*tls.Certificate, error) {
				switch {
				case m.cert == nil:
					h.refusal = errors.New("the server requires a client certificate and this client has none: " +
						"give it --tls-cert and --tls-key, issued by the CA the server's --tls-ca names")
					return &tls.Certificate{}, nil
				case req.SupportsCertificate(m.cert) != nil:
					h.refusal = fmt.Errorf("the server accepts client certificates issued by %s only, and this client's --tls-cert %s is issued by %s: "+
						"give it a certificate issued by the CA the server's --tls-ca names", issuers(req.AcceptableCAs), f.Cert, m.cert.Leaf.Issuer.String())
				}
				return m.cert, nil
			}}
		return h
	}, nil
}

// issuers names the CAs of a certificate request (DER subjects). No quotes:
// gRPC quotes the handshake's error again, and would escape them.
func issuers(subjects [][]byte) string {
	var names []string
	for _, der := range subjects {
		var rdn pkix.RDNSequence
		if _, err := asn1.Unmarshal(der, &rdn); err != nil {
			continue // a name that does not parse: the others still help
		}
		var n pkix.Name
		n.FillFromRDNSequence(&rdn)
		names = append(names, n.String())
	}
	return strings.Join(names, " or ")
}

// load checks that the flags go together and reads the files once.
func load(f Files, log *zap.Logger) (*reloadfile.Value[material], error) {
	switch {
	case f.Cert != "" && f.Key == "":
		return nil, fmt.Errorf("--tls-cert %s needs --tls-key: give the file of the certificate's private key", f.Cert)
	case f.Key != "" && f.Cert == "":
		return nil, fmt.Errorf("--tls-key %s needs --tls-cert: give the file of the certificate the key belongs to", f.Key)
	}
	var paths []string
	for _, p := range []string{f.Cert, f.Key, f.CA} {
		if p != "" {
			paths = append(paths, p)
		}
	}
	return reloadfile.New("TLS files", log, func() (material, error) { return read(f) }, paths...)
}

// read reads and checks the files of f.
func read(f Files) (material, error) {
	var m material
	if f.Cert != "" {
		cert, err := ReadPair("--tls-cert", f.Cert, "--tls-key", f.Key)
		if err != nil {
			return m, err
		}
		m.cert = &cert
	}
	if f.CA != "" {
		ca, err := ReadCA("--tls-ca", f.CA)
		if err != nil {
			return m, err
		}
		m.ca = ca
	}
	return m, nil
}

// ReadPair reads a PEM certificate and its private key, each file read apart
// first, since tls.X509KeyPair's errors do not say which one is wrong. The
// names say how the operator gave each file (a flag, a DSN parameter).
func ReadPair(certName, certPath, keyName, keyPath string) (tls.Certificate, error) {
	certPEM, err := os.ReadFile(certPath)
	if err != nil {
		return tls.Certificate{}, fmt.Errorf("%s: %w", certName, err)
	}
	keyPEM, err := os.ReadFile(keyPath)
	if err != nil {
		return tls.Certificate{}, fmt.Errorf("%s: %w", keyName, err)
	}
	cert, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return tls.Certificate{}, fmt.Errorf("%s %s with %s %s: %w (give a PEM certificate and the private key it was issued for)",
			certName, certPath, keyName, keyPath, err)
	}
	return cert, nil
}

// ReadCA reads a PEM bundle of CA certificates; name says how the operator
// gave the file (a flag, a DSN parameter).
func ReadCA(name, path string) (*x509.CertPool, error) {
	caPEM, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(caPEM) {
		return nil, fmt.Errorf("%s %s holds no PEM certificate: give the CA certificate (-----BEGIN CERTIFICATE-----)", name, path)
	}
	return pool, nil
}
