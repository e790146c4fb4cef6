package dbconn

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"testing"

	"github.com/go-mysql-org/go-mysql/client"
	"github.com/go-sql-driver/mysql"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/rowlift/rowlift/internal/sandbox"
	"github.com/rowlift/rowlift/internal/sandbox/sandboxtest"
)

// TestTLSFilesCheck covers every tls mode with every combination of rowlift's
// TLS parameters.
func TestTLSFilesCheck(t *testing.T) {
	const (
		pair     = "tls-cert and tls-key go together"
		off      = "tls=false turns TLS off"
		skipCA   = "tls=skip-verify does not verify the server, so tls-ca would be ignored"
		prefCA   = "tls=preferred does not verify the server, so tls-ca would be ignored"
		accepted = ""
	)
	type files struct{ ca, cert, key bool }
	// want[mode][files] is the error each combination gets, "" for none.
	want := map[string]map[files]string{
		"": {
			{}: accepted, {ca: true}: accepted, {cert: true}: pair, {key: true}: pair,
			{cert: true, key: true}: accepted, {ca: true, cert: true}: pair, {ca: true, key: true}: pair, {ca: true, cert: true, key: true}: accepted,
		},
		"true": {
			{}: accepted, {ca: true}: accepted, {cert: true}: pair, {key: true}: pair,
			{cert: true, key: true}: accepted, {ca: true, cert: true}: pair, {ca: true, key: true}: pair, {ca: true, cert: true, key: true}: accepted,
		},
		"false": {
			{}: off, {ca: true}: off, {cert: true}: pair, {key: true}: pair,
			{cert: true, key: true}: off, {ca: true, cert: true}: pair, {ca: true, key: true}: pair, {ca: true, cert: true, key: true}: off,
		},
		"skip-verify": {
			{}: accepted, {ca: true}: skipCA, {cert: true}: pair, {key: true}: pair,
			{cert: true, key: true}: accepted, {ca: true, cert: true}: pair, {ca: true, key: true}: pair, {ca: true, cert: true, key: true}: skipCA,
		},
		"preferred": {
			{}: accepted, {ca: true}: prefCA, {cert: true}: pair, {key: true}: pair,
			{cert: true, key: true}: accepted, {ca: true, cert: true}: pair, {ca: true, key: true}: pair, {ca: true, cert: true, key: true}: prefCA,
		},
	}
	name := func(given bool, file string) string {
		if given {
			return file
		}
		return ""
	}
	for mode, cases := range want {
		require.Len(t, cases, 8, "mode %q: every combination", mode)
		for f, wantErr := range cases {
			err := tlsFiles{ca: name(f.ca, "ca.pem"), cert: name(f.cert, "c.pem"), key: name(f.key, "k.pem")}.check(mode)
			what := fmt.Sprintf("tls=%q with %+v", mode, f)
			if wantErr == accepted {
				assert.NoError(t, err, what)
			} else {
				assert.ErrorContains(t, err, wantErr, what)
			}
		}
	}
}

func TestSplitTLSParams(t *testing.T) {
	for _, c := range []struct {
		dsn, rest string
		files     tlsFiles
		err       string
	}{
		{dsn: "u:p@tcp(h:3306)/db", rest: "u:p@tcp(h:3306)/db"},
		{dsn: "u:p@tcp(h:3306)/db?tls=true&timeout=5s", rest: "u:p@tcp(h:3306)/db?tls=true&timeout=5s"},
		{dsn: "u:p@tcp(h:3306)/?tls-ca=/etc/ca.pem", rest: "u:p@tcp(h:3306)/", files: tlsFiles{ca: "/etc/ca.pem"}},
		{dsn: "u:p@tcp(h:3306)/?tls-ca=%2Fetc%2Fca+1.pem", rest: "u:p@tcp(h:3306)/", files: tlsFiles{ca: "/etc/ca+1.pem"}},
		{dsn: "u:p@tcp(h:3306)/db?tls-ca=/c&tls=true&tls-cert=/a&timeout=5s&tls-key=/b", rest: "u:p@tcp(h:3306)/db?tls=true&timeout=5s",
			files: tlsFiles{ca: "/c", cert: "/a", key: "/b"}},
		// A '?' or '@' in the password is not where parameters start.
		{dsn: "u:p?w&tls-ca=x@tcp(h:3306)/", rest: "u:p?w&tls-ca=x@tcp(h:3306)/"},
		{dsn: "u:p?w@x@tcp(h:3306)/?tls-ca=/c", rest: "u:p?w@x@tcp(h:3306)/", files: tlsFiles{ca: "/c"}},
		{dsn: "tcp(h:3306)/?tls-ca=/c", rest: "tcp(h:3306)/", files: tlsFiles{ca: "/c"}},
		{dsn: "u:p@tcp(h:3306)/?tls-ca=", err: "tls-ca: give one file name, once"},
		{dsn: "u:p@tcp(h:3306)/?tls-ca=/a&tls-ca=/b", err: "tls-ca: give one file name, once"},
		{dsn: "u:p@tcp(h:3306)/?tls-key=%zz", err: "tls-key: invalid URL escape"},
	} {
		rest, files, err := splitTLSParams(c.dsn)
		if c.err != "" {
			assert.ErrorContains(t, err, c.err, c.dsn)
			continue
		}
		assert.NoError(t, err, c.dsn)
		assert.Equal(t, c.rest, rest, c.dsn)
		assert.Equal(t, c.files, files, c.dsn)
	}
}

// TestParseDSNTLS: rowlift's TLS parameters become the driver's TLS config
// and never reach the server as session variables; bad files are named.
func TestParseDSNTLS(t *testing.T) {
	f := sandboxtest.MakeTLS(t, "parse")
	q := url.QueryEscape
	cfg, err := ParseDSN("u:p@tcp(db.example:3306)/?tls-ca=" + f.CA + "&tls-cert=" + f.ClientCert + "&tls-key=" + q(f.ClientKey) + "&wait_timeout=60")
	require.NoError(t, err)
	require.NotNil(t, cfg.TLS, "tls-ca implies TLS")
	assert.Equal(t, "db.example", cfg.TLS.ServerName, "the server is verified against the DSN's host")
	assert.False(t, cfg.TLS.InsecureSkipVerify)
	assert.NotNil(t, cfg.TLS.RootCAs)
	assert.Equal(t, map[string]string{"wait_timeout": "60"}, cfg.Params, "only server variables are left")
	// The client certificate is read at each handshake: a renewed one is
	// presented by the next connection.
	presented := func() []byte {
		c, err := cfg.TLS.GetClientCertificate(&tls.CertificateRequestInfo{})
		require.NoError(t, err)
		return c.Certificate[0]
	}
	first := presented()
	renewed := sandboxtest.MakeTLS(t, "renewed")
	for from, to := range map[string]string{renewed.ClientCert: f.ClientCert, renewed.ClientKey: f.ClientKey} {
		require.NoError(t, os.WriteFile(to, mustRead(t, from), 0o600))
	}
	require.NotEqual(t, first, presented())
	block, _ := pem.Decode(mustRead(t, renewed.ClientCert))
	require.Equal(t, block.Bytes, presented())

	cfg, err = ParseDSN("u:p@tcp(db.example:3306)/?tls=skip-verify&tls-cert=" + q(f.ClientCert) + "&tls-key=" + q(f.ClientKey))
	require.NoError(t, err)
	assert.True(t, cfg.TLS.InsecureSkipVerify, "skip-verify stays skip-verify with a client certificate")
	assert.NotNil(t, cfg.TLS.GetClientCertificate)

	cfg, err = ParseDSN("u:p@tcp(db.example:3306)/?tls=true")
	require.NoError(t, err)
	assert.Nil(t, cfg.TLS.RootCAs, "without tls-ca the system roots verify")

	notPEM := filepath.Join(t.TempDir(), "ca.txt")
	require.NoError(t, os.WriteFile(notPEM, []byte("not a certificate"), 0o600))
	for dsn, want := range map[string]string{
		"u:p@tcp(h:3306)/?tls-ca=/nonexistent/ca.pem":                                  "DSN tls-ca: open /nonexistent/ca.pem: no such file or directory",
		"u:p@tcp(h:3306)/?tls-ca=" + q(notPEM):                                         "DSN tls-ca " + notPEM + " holds no PEM certificate: give the CA certificate (-----BEGIN CERTIFICATE-----)",
		"u:p@tcp(h:3306)/?tls-cert=" + q(f.ClientCert) + "&tls-key=" + q(f.ServerCert): "DSN tls-cert " + f.ClientCert + " with DSN tls-key " + f.ServerCert + ": tls:",
		"u:p@tcp(h:3306)/?tls-cert=" + q(f.ClientCert):                                 "DSN: tls-cert and tls-key go together",
		"u:p@tcp(h:3306)/?tls=false&tls-ca=" + q(f.CA):                                 "DSN: tls=false turns TLS off",
		"u:p@tcp(h:3306)/?tls=custom":                                                  "rowlift registers no named TLS configs: use tls=true with tls-ca=FILE",
		"u:p@tcp(h:3306)":                                                              "parse DSN (want user:password@tcp(host:port)/db)",
	} {
		_, err := ParseDSN(dsn)
		assert.ErrorContains(t, err, want, dsn)
	}
}

func mustRead(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	return b
}

// TestExplainHostnameMismatch: a certificate for another host is named as
// such (the servers in tests have certificates for the address they use).
func TestExplainHostnameMismatch(t *testing.T) {
	cfg, err := ParseDSN("u:p@tcp(db.example:3306)/?tls=true")
	require.NoError(t, err)
	err = Explain(fmt.Errorf("handshake: %w", x509.HostnameError{Certificate: &x509.Certificate{DNSNames: []string{"other.example"}}, Host: "db.example"}), cfg, "target")
	require.ErrorIs(t, err, ErrTLS)
	require.ErrorContains(t, err, "target server db.example:3306: its TLS certificate is not for the host the target DSN names")
	require.ErrorContains(t, err, "connect with a host name the certificate lists")
}

// TestTLSToServer runs rowlift's connections against a server that requires
// TLS with a certificate from a private CA: what works, and what each wrong
// DSN is told.
func TestTLSToServer(t *testing.T) {
	sandboxtest.EachFlavor(t, func(t *testing.T, flavor sandbox.Flavor) {
		f := sandboxtest.MakeTLS(t, "server")
		srv := sandboxtest.Start(t, sandbox.Options{Flavor: flavor, Args: f.ServerArgs()})
		admin := sandboxtest.OpenSocket(t, srv, "")
		ctx := context.Background()
		q := url.QueryEscape
		base := "root@tcp(" + srv.Addr() + ")/"
		withCA := base + "?tls-ca=" + q(f.CA)

		ping := func(dsn string) (*mysql.Config, error) {
			db, cfg, err := Open(dsn, Source)
			require.NoError(t, err)
			defer db.Close()
			return cfg, Ping(ctx, db, cfg, "source")
		}
		_, err := ping(base)
		if flavor == sandbox.MySQL {
			require.ErrorIs(t, err, ErrTLS)
			require.ErrorContains(t, err, "source server "+srv.Addr()+" requires TLS (require_secure_transport=ON): add tls=true to the source DSN, and tls-ca=FILE")
		} else {
			require.ErrorIs(t, err, ErrAccessDenied, "MariaDB says access denied")
			require.ErrorContains(t, err, "add tls=true to the source DSN if the server requires TLS")
		}
		_, err = ping(base + "?tls=true")
		require.ErrorIs(t, err, ErrTLS)
		require.ErrorContains(t, err, "its TLS certificate does not verify (tls: failed to verify certificate: x509: certificate signed by unknown authority): "+
			"set tls-ca=FILE in the source DSN to the CA that signed it")
		other := sandboxtest.MakeTLS(t, "other")
		_, err = ping(base + "?tls-ca=" + q(other.CA))
		require.ErrorContains(t, err, "set tls-ca=FILE in the source DSN", "a CA that did not sign the server's certificate")

		// The CA verifies the server; a user that must show a client
		// certificate gets in with one, and only with one.
		sandboxtest.Exec(t, admin, "CREATE USER 'x509'@'127.0.0.1' REQUIRE X509", "GRANT SELECT ON *.* TO 'x509'@'127.0.0.1'")
		certUser := "x509@tcp(" + srv.Addr() + ")/?tls-ca=" + q(f.CA)
		_, err = ping(certUser)
		require.ErrorIs(t, err, ErrAccessDenied, "no client certificate")
		for _, dsn := range []string{withCA, certUser + "&tls-cert=" + q(f.ClientCert) + "&tls-key=" + q(f.ClientKey)} {
			db, cfg, err := Open(dsn, Source)
			require.NoError(t, err)
			var name, cipher string
			require.NoError(t, db.QueryRowContext(ctx, "SHOW SESSION STATUS LIKE 'Ssl_cipher'").Scan(&name, &cipher))
			require.NotEmpty(t, cipher, "the session is encrypted")

			// The binlog client gets the same TLS: it logs in with it.
			tc, err := BinlogTLS(ctx, db, cfg)
			require.NoError(t, err)
			require.NotNil(t, tc)
			conn, err := client.Connect(srv.Addr(), cfg.User, "", "", func(c *client.Conn) error {
				c.SetTLSConfig(tc)
				return nil
			})
			require.NoError(t, err, dsn)
			require.NoError(t, conn.Close())
			db.Close()
		}
		// Without it, the binlog client is refused, and told what to set.
		_, cfg, err := Open(withCA, Source)
		require.NoError(t, err)
		_, err = client.Connect(srv.Addr(), "root", "", "")
		require.Error(t, err)
		if flavor == sandbox.MySQL {
			require.ErrorContains(t, Explain(err, cfg, "source"), "requires TLS (require_secure_transport=ON): add tls=true")
		}
	})
}

// TestBinlogTLSFollowsThePool: the binlog client uses TLS exactly when the
// pool does, including tls=preferred against a server without TLS (MariaDB
// offers none unless configured; MySQL always does).
func TestBinlogTLSFollowsThePool(t *testing.T) {
	srv := sandboxtest.Start(t, sandbox.Options{Flavor: sandbox.MariaDB})
	ctx := context.Background()
	tlsOf := func(params string) (*mysql.Config, error) {
		db, cfg, err := Open(srv.DSN("")+params, Source)
		require.NoError(t, err)
		defer db.Close()
		tc, err := BinlogTLS(ctx, db, cfg)
		if err != nil {
			return nil, err
		}
		cfg.TLS = tc
		return cfg, nil
	}
	cfg, err := tlsOf("")
	require.NoError(t, err)
	require.Nil(t, cfg.TLS, "no tls in the DSN: none")
	cfg, err = tlsOf("?tls=preferred")
	require.NoError(t, err)
	require.Nil(t, cfg.TLS, "preferred against a server without TLS: plaintext, as the pool")

	db, cfg, err := Open(srv.DSN("")+"?tls=true", Source)
	require.NoError(t, err)
	defer db.Close()
	tc, err := BinlogTLS(ctx, db, cfg)
	require.NoError(t, err)
	require.Equal(t, "127.0.0.1", tc.ServerName, "tls=true verifies the server's name")
	err = Ping(ctx, db, cfg, "target")
	require.ErrorIs(t, err, ErrTLS)
	require.ErrorContains(t, err, "target server "+srv.Addr()+" offers no TLS, which the target DSN asks for: enable TLS on the server")
	_, err = client.Connect(srv.Addr(), "root", "", "", func(c *client.Conn) error {
		c.SetTLSConfig(tc)
		return nil
	})
	require.ErrorContains(t, Explain(err, cfg, "source"), "source server "+srv.Addr()+" offers no TLS")
	require.False(t, errors.Is(err, ErrTLS), "only Explain marks it")
}
