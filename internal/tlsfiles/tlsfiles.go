// Package tlsfiles turns the --tls-cert, --tls-key and --tls-ca files of a
// rowlift process into TLS configurations that follow the files as they are
// rotated: the next handshake after a change uses the new certificate and CA
// (see internal/reloadfile). A server with a CA requires and verifies client
// certificates (mutual TLS); a client with a CA verifies the server with it.
package tlsfiles

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"

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
// and CA are re-read for each handshake whose files changed.
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

// Client returns a function that gives the TLS configuration of a client as
// the files are now: it verifies the server with --tls-ca (the system's CAs
// without it) and presents --tls-cert when one is given. Call it for each
// handshake, so a rotation applies to the next connection.
func Client(f Files, log *zap.Logger) (func() *tls.Config, error) {
	files, err := load(f, log)
	if err != nil {
		return nil, err
	}
	return func() *tls.Config {
		m := files.Get()
		c := &tls.Config{MinVersion: tls.VersionTLS12, RootCAs: m.ca}
		if m.cert != nil {
			c.Certificates = []tls.Certificate{*m.cert}
		}
		return c
	}, nil
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
		// Read apart first: tls.X509KeyPair's errors do not say which file is wrong.
		certPEM, err := os.ReadFile(f.Cert)
		if err != nil {
			return m, fmt.Errorf("--tls-cert: %w", err)
		}
		keyPEM, err := os.ReadFile(f.Key)
		if err != nil {
			return m, fmt.Errorf("--tls-key: %w", err)
		}
		cert, err := tls.X509KeyPair(certPEM, keyPEM)
		if err != nil {
			return m, fmt.Errorf("--tls-cert %s with --tls-key %s: %w (give a PEM certificate and the private key it was issued for)",
				f.Cert, f.Key, err)
		}
		m.cert = &cert
	}
	if f.CA != "" {
		caPEM, err := os.ReadFile(f.CA)
		if err != nil {
			return m, fmt.Errorf("--tls-ca: %w", err)
		}
		m.ca = x509.NewCertPool()
		if !m.ca.AppendCertsFromPEM(caPEM) {
			return m, fmt.Errorf("--tls-ca %s holds no PEM certificate: give the CA certificate (-----BEGIN CERTIFICATE-----)", f.CA)
		}
	}
	return m, nil
}
