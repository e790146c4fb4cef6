package dbconn

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"database/sql"
	"errors"
	"fmt"
	"net"
	"net/url"
	"strings"

	"github.com/go-sql-driver/mysql"

	"github.com/rowlift/rowlift/internal/tlsfiles"
)

// rowlift's own DSN parameters, taken out before the driver sees the DSN: a
// binary's user cannot call mysql.RegisterTLSConfig, so these are how a private
// CA and a client certificate get in. They hold dashes, which no server
// variable does, so they never clash with one.
const (
	paramCA   = "tls-ca"
	paramCert = "tls-cert"
	paramKey  = "tls-key"
)

// tlsFiles are the files rowlift's TLS parameters name; empty when not given.
type tlsFiles struct {
	ca, cert, key string
}

func (f tlsFiles) any() bool { return f.ca != "" || f.cert != "" || f.key != "" }

// splitTLSParams takes rowlift's TLS parameters out of a DSN before the driver
// parses it: the driver would send them to the server, and reads a '/' in a
// parameter value as the start of the database name. Parameters start at the
// first '?' after the last '@', the one that ends the user and password (which
// may hold either); a file name holding '@', '?' or '&' must be URL-escaped.
func splitTLSParams(dsn string) (string, tlsFiles, error) {
	var f tlsFiles
	at := strings.LastIndex(dsn, "@") + 1
	i := strings.Index(dsn[at:], "?")
	if i < 0 {
		return dsn, f, nil
	}
	i += at
	var kept []string
	for _, param := range strings.Split(dsn[i+1:], "&") {
		key, value, _ := strings.Cut(param, "=")
		var dst *string
		switch key {
		case paramCA:
			dst = &f.ca
		case paramCert:
			dst = &f.cert
		case paramKey:
			dst = &f.key
		default:
			kept = append(kept, param)
			continue
		}
		v, err := url.PathUnescape(value)
		if err != nil {
			return "", f, fmt.Errorf("%s: %w", key, err)
		}
		if v == "" || *dst != "" {
			return "", f, fmt.Errorf("%s: give one file name, once", key)
		}
		*dst = v
	}
	if !f.any() {
		return dsn, f, nil
	}
	if len(kept) == 0 {
		return dsn[:i], f, nil
	}
	return dsn[:i+1] + strings.Join(kept, "&"), f, nil
}

// check refuses combinations of the driver's tls mode and rowlift's TLS
// parameters that cannot mean what the operator wants. mode is the DSN's tls
// value as the driver keeps it ("" when absent).
func (f tlsFiles) check(mode string) error {
	if (f.cert == "") != (f.key == "") {
		return fmt.Errorf("%s and %s go together: give both the client certificate and its key, or neither", paramCert, paramKey)
	}
	switch mode {
	case "false":
		return fmt.Errorf("tls=false turns TLS off, but %s, %s or %s asks for it: drop one", paramCA, paramCert, paramKey)
	case "skip-verify", "preferred":
		if f.ca != "" {
			return fmt.Errorf("tls=%s does not verify the server, so %s would be ignored: use tls=true (or leave tls out) with %s", mode, paramCA, paramCA)
		}
	}
	return nil
}

// ParseDSN parses a go-sql-driver DSN that may carry rowlift's TLS parameters:
// tls-ca=FILE verifies the server against that CA bundle (PEM) instead of the
// system's roots, and implies tls=true; tls-cert=FILE and tls-key=FILE present a
// client certificate. File names may be written plainly (/etc/rowlift/ca.pem) or
// URL-escaped. The client certificate is read again for every new connection;
// the CA is read once, and a restart picks up a new one.
func ParseDSN(dsn string) (*mysql.Config, error) {
	rest, f, err := splitTLSParams(dsn)
	if err != nil {
		return nil, fmt.Errorf("DSN: %w", err)
	}
	cfg, err := mysql.ParseDSN(rest)
	if err != nil {
		// The driver has no error value for an unknown tls name, only its text.
		if strings.Contains(err.Error(), "unknown config name") {
			return nil, fmt.Errorf("parse DSN: %w (rowlift registers no named TLS configs: use tls=true with %s=FILE, and %s=FILE and %s=FILE for a client certificate)",
				err, paramCA, paramCert, paramKey)
		}
		return nil, fmt.Errorf("parse DSN (want user:password@tcp(host:port)/db): %w", err)
	}
	if !f.any() {
		return cfg, nil
	}
	if err := f.check(cfg.TLSConfig); err != nil {
		return nil, fmt.Errorf("DSN: %w", err)
	}
	if cfg.TLS == nil {
		host, _, _ := net.SplitHostPort(cfg.Addr)
		cfg.TLS = &tls.Config{ServerName: host}
	}
	if f.ca != "" {
		if cfg.TLS.RootCAs, err = tlsfiles.ReadCA("DSN "+paramCA, f.ca); err != nil {
			return nil, err
		}
	}
	if f.cert != "" {
		if _, err := f.clientCertificate(nil); err != nil {
			return nil, err
		}
		cfg.TLS.GetClientCertificate = f.clientCertificate
	}
	return cfg, nil
}

// clientCertificate loads the client certificate at each TLS handshake, so
// the next connection presents a renewed one (Kubernetes updates a mounted
// Secret in place) with no restart.
func (f tlsFiles) clientCertificate(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
	pair, err := tlsfiles.ReadPair("DSN "+paramCert, f.cert, "DSN "+paramKey, f.key)
	return &pair, err
}

// BinlogTLS is the TLS config a binlog dump (go-mysql, which ignores the DSN)
// must use to reach the server as the pool does: none, or the driver's own,
// with its roots, client certificate and server name. Under tls=preferred the
// driver falls back to plaintext when the server offers no TLS; the pool's
// session says which way it went.
func BinlogTLS(ctx context.Context, db *sql.DB, cfg *mysql.Config) (*tls.Config, error) {
	if cfg.TLS == nil {
		return nil, nil
	}
	if cfg.AllowFallbackToPlaintext {
		var name, cipher string
		if err := db.QueryRowContext(ctx, "SHOW SESSION STATUS LIKE 'Ssl_cipher'").Scan(&name, &cipher); err != nil {
			return nil, fmt.Errorf("read whether the connection uses TLS: %w", err)
		}
		if cipher == "" {
			return nil, nil
		}
	}
	return cfg.TLS.Clone(), nil
}

// Server error numbers about transport security: MySQL refuses a plaintext
// login under require_secure_transport=ON with its own error, MariaDB with
// plain access denied.
const (
	secureTransportRequired = 3159
	accessDenied            = 1045
)

// explainTLS says what to set when err is about TLS between rowlift and the
// server, and returns nil for any other error. It knows the errors of both
// clients rowlift uses: go-sql-driver and go-mysql (the binlog dump).
func explainTLS(err error, cfg *mysql.Config, what string) error {
	var verify *tls.CertificateVerificationError
	var hostname x509.HostnameError
	switch {
	case errors.As(err, &hostname):
		return fmt.Errorf("%s server %s: its TLS certificate is not for the host the %s DSN names (%v): "+
			"connect with a host name the certificate lists", what, cfg.Addr, what, err)
	case errors.As(err, &verify):
		return fmt.Errorf("%s server %s: its TLS certificate does not verify (%v): set %s=FILE in the %s DSN to the CA that signed it",
			what, cfg.Addr, err, paramCA, what)
	// go-mysql has no error value for this one, only its text.
	case errors.Is(err, mysql.ErrNoTLS) || strings.Contains(err.Error(), "does not support TLS required by the client"):
		return fmt.Errorf("%s server %s offers no TLS, which the %s DSN asks for: enable TLS on the server (ssl_cert, ssl_key) "+
			"or take tls, %s, %s and %s out of the DSN", what, cfg.Addr, what, paramCA, paramCert, paramKey)
	case ServerError(err) == secureTransportRequired:
		return fmt.Errorf("%s server %s requires TLS (require_secure_transport=ON): add tls=true to the %s DSN, "+
			"and %s=FILE if a private CA signed its certificate", what, cfg.Addr, what, paramCA)
	}
	return nil
}
