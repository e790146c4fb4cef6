package tlsfiles

import (
	"crypto/tls"
	"crypto/x509"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/rowlift/rowlift/internal/testcerts"
)

// dial makes one TLS connection from a client with cfg to a server with srv
// and returns the certificate the server presented, or the error either side
// ended the handshake with (a refused client certificate shows on the
// client's first read under TLS 1.3).
func dial(t *testing.T, srv *tls.Config, cfg *tls.Config) (*x509.Certificate, error) {
	t.Helper()
	lis, err := tls.Listen("tcp", "127.0.0.1:0", srv)
	require.NoError(t, err)
	defer lis.Close()
	go func() {
		c, err := lis.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		if c.(*tls.Conn).Handshake() == nil {
			_, _ = c.Write([]byte{1})
		}
	}()
	c, err := tls.Dial("tcp", lis.Addr().String(), cfg)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	if _, err := c.Read(make([]byte, 1)); err != nil {
		return nil, err
	}
	return c.ConnectionState().PeerCertificates[0], nil
}

func serial(t *testing.T, path string) string {
	t.Helper()
	pair, err := tls.LoadX509KeyPair(path, path[:len(path)-len(".crt")]+".key")
	require.NoError(t, err)
	c, err := x509.ParseCertificate(pair.Certificate[0])
	require.NoError(t, err)
	return c.SerialNumber.String()
}

func TestMutualTLS(t *testing.T) {
	ca, other := testcerts.NewCA(t), testcerts.NewCA(t)
	s, c, stranger := ca.Issue(t, "server"), ca.Issue(t, "client"), other.Issue(t, "stranger")
	srv, err := Server(Files{Cert: s.Cert, Key: s.Key, CA: ca.Cert}, zap.NewNop())
	require.NoError(t, err)
	client := func(f Files) *Handshake {
		cfg, err := Client(f, zap.NewNop())
		require.NoError(t, err)
		return cfg()
	}

	h := client(Files{Cert: c.Cert, Key: c.Key, CA: ca.Cert})
	got, err := dial(t, srv, h.Config)
	require.NoError(t, err)
	require.Equal(t, serial(t, s.Cert), got.SerialNumber.String())
	require.NoError(t, h.Refusal())

	h = client(Files{CA: ca.Cert})
	_, err = dial(t, srv, h.Config)
	require.ErrorContains(t, err, "certificate required", "no client certificate")
	require.EqualError(t, h.Refusal(), "the server requires a client certificate and this client has none: "+
		"give it --tls-cert and --tls-key, issued by the CA the server's --tls-ca names")
	h = client(Files{Cert: stranger.Cert, Key: stranger.Key, CA: ca.Cert})
	_, err = dial(t, srv, h.Config)
	require.ErrorContains(t, err, "unknown certificate authority", "a client certificate from another CA")
	require.ErrorContains(t, h.Refusal(), "the server accepts client certificates issued by CN=rowlift test CA ")
	h = client(Files{Cert: c.Cert, Key: c.Key, CA: other.Cert})
	_, err = dial(t, srv, h.Config)
	require.ErrorContains(t, err, "certificate signed by unknown authority", "a server certificate from another CA")

	// Without --tls-ca the server asks for no client certificate.
	plain, err := Server(Files{Cert: s.Cert, Key: s.Key}, zap.NewNop())
	require.NoError(t, err)
	h = client(Files{CA: ca.Cert})
	_, err = dial(t, plain, h.Config)
	require.NoError(t, err)
	require.NoError(t, h.Refusal())
}

// TestRotation rotates the server's files the way Kubernetes does (a new
// directory, then the ..data symlink swapped onto it) and in place: the next
// handshake presents the new certificate; a broken rotation keeps the last
// good one and logs one error; the CA rotates too.
func TestRotation(t *testing.T) {
	ca, next := testcerts.NewCA(t), testcerts.NewCA(t)
	c := ca.Issue(t, "client")
	dir := t.TempDir()
	// mount puts the files in a new directory and points ..data at it.
	mount := func(files map[string]string) {
		gen, err := os.MkdirTemp(dir, "gen")
		require.NoError(t, err)
		for name, src := range files {
			b, err := os.ReadFile(src)
			require.NoError(t, err)
			require.NoError(t, os.WriteFile(filepath.Join(gen, name), b, 0o600))
		}
		tmp := filepath.Join(dir, "..data_tmp")
		require.NoError(t, os.Symlink(filepath.Base(gen), tmp))
		require.NoError(t, os.Rename(tmp, filepath.Join(dir, "..data")))
	}
	first := ca.Issue(t, "server")
	firstSerial := serial(t, first.Cert)
	mount(map[string]string{"tls.crt": first.Cert, "tls.key": first.Key, "ca.crt": ca.Cert})
	f := Files{Cert: filepath.Join(dir, "tls.crt"), Key: filepath.Join(dir, "tls.key"), CA: filepath.Join(dir, "ca.crt")}
	for _, name := range []string{"tls.crt", "tls.key", "ca.crt"} {
		require.NoError(t, os.Symlink(filepath.Join("..data", name), filepath.Join(dir, name)))
	}
	core, logs := observer.New(zapcore.InfoLevel)
	srv, err := Server(f, zap.New(core))
	require.NoError(t, err)
	cli, err := Client(Files{Cert: c.Cert, Key: c.Key, CA: ca.Cert}, zap.NewNop())
	require.NoError(t, err)

	got, err := dial(t, srv, cli().Config)
	require.NoError(t, err)
	require.Equal(t, firstSerial, got.SerialNumber.String())

	second := ca.Issue(t, "server") // overwrites first's files, read above
	secondSerial := serial(t, second.Cert)
	mount(map[string]string{"tls.crt": second.Cert, "tls.key": second.Key, "ca.crt": ca.Cert})
	got, err = dial(t, srv, cli().Config)
	require.NoError(t, err)
	require.Equal(t, secondSerial, got.SerialNumber.String(), "the handshake after the swap presents the new certificate")
	require.Equal(t, 1, logs.FilterMessage("TLS files reloaded").Len())

	// A certificate without its key: the server keeps presenting the second.
	third := ca.Issue(t, "server")
	mount(map[string]string{"tls.crt": third.Cert, "tls.key": second.Cert, "ca.crt": ca.Cert})
	for range 2 {
		got, err = dial(t, srv, cli().Config)
		require.NoError(t, err)
		require.Equal(t, secondSerial, got.SerialNumber.String(), "a broken rotation keeps the last good certificate")
	}
	broken := logs.FilterMessage("TLS files changed but cannot be loaded; keeping the previous ones until they are fixed").All()
	require.Len(t, broken, 1, "one error per change, not per handshake")
	require.Contains(t, broken[0].ContextMap()["error"], "--tls-key")

	// In place, and the CA with it: the client from the old CA is refused now.
	fixed := filepath.Join(dir, "..data")
	for name, src := range map[string]string{"tls.crt": third.Cert, "tls.key": third.Key, "ca.crt": next.Cert} {
		b, err := os.ReadFile(src)
		require.NoError(t, err)
		require.NoError(t, os.WriteFile(filepath.Join(fixed, name), b, 0o600))
	}
	_, err = dial(t, srv, cli().Config)
	require.ErrorContains(t, err, "unknown certificate authority")
	nc := next.Issue(t, "client")
	cli, err = Client(Files{Cert: nc.Cert, Key: nc.Key, CA: ca.Cert}, zap.NewNop())
	require.NoError(t, err)
	got, err = dial(t, srv, cli().Config)
	require.NoError(t, err)
	require.Equal(t, serial(t, third.Cert), got.SerialNumber.String())
}

// TestClientRotation: a client presents its rotated certificate and trusts
// its rotated CA on the next handshake.
func TestClientRotation(t *testing.T) {
	ca, next := testcerts.NewCA(t), testcerts.NewCA(t)
	s, c := ca.Issue(t, "server"), ca.Issue(t, "client")
	srv, err := Server(Files{Cert: s.Cert, Key: s.Key, CA: ca.Cert}, zap.NewNop())
	require.NoError(t, err)
	cli, err := Client(Files{Cert: c.Cert, Key: c.Key, CA: ca.Cert}, zap.NewNop())
	require.NoError(t, err)
	_, err = dial(t, srv, cli().Config)
	require.NoError(t, err)

	copyFile(t, next.Cert, ca.Cert)
	_, err = dial(t, srv, cli().Config)
	require.ErrorContains(t, err, "certificate signed by unknown authority", "the client now trusts only the new CA")

	ns := next.Issue(t, "server")
	srv, err = Server(Files{Cert: ns.Cert, Key: ns.Key}, zap.NewNop())
	require.NoError(t, err)
	_, err = dial(t, srv, cli().Config)
	require.NoError(t, err)
}

func copyFile(t *testing.T, from, to string) {
	t.Helper()
	b, err := os.ReadFile(from)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(to, b, 0o600))
}

// TestHalfConfigured: every flag combination or file that cannot work is an
// error at startup that names the flag to fix.
func TestHalfConfigured(t *testing.T) {
	ca := testcerts.NewCA(t)
	p, q := ca.Issue(t, "p"), ca.Issue(t, "q")
	garbage := filepath.Join(t.TempDir(), "garbage.pem")
	require.NoError(t, os.WriteFile(garbage, []byte("not a certificate\n"), 0o600))
	missing := filepath.Join(t.TempDir(), "missing.pem")
	for _, tc := range []struct {
		name   string
		f      Files
		server bool
		want   string
	}{
		{"cert without key", Files{Cert: p.Cert}, false, "--tls-cert " + p.Cert + " needs --tls-key"},
		{"key without cert", Files{Key: p.Key, CA: ca.Cert}, false, "--tls-key " + p.Key + " needs --tls-cert"},
		{"server with only a CA", Files{CA: ca.Cert}, true, "--tls-ca needs --tls-cert and --tls-key: a server must present a certificate"},
		{"missing cert", Files{Cert: missing, Key: p.Key}, false, "--tls-cert: open " + missing + ": no such file or directory"},
		{"missing key", Files{Cert: p.Cert, Key: missing}, true, "--tls-key: open " + missing + ": no such file or directory"},
		{"missing CA", Files{CA: missing}, false, "--tls-ca: open " + missing},
		{"key of another cert", Files{Cert: p.Cert, Key: q.Key}, true,
			"--tls-cert " + p.Cert + " with --tls-key " + q.Key + ": tls: private key does not match public key (give a PEM certificate and the private key it was issued for)"},
		{"cert is no PEM", Files{Cert: garbage, Key: p.Key}, false, "--tls-cert " + garbage + " with --tls-key " + p.Key + ": tls: failed to find any PEM data in certificate input"},
		{"CA is no PEM", Files{Cert: p.Cert, Key: p.Key, CA: garbage}, true, "--tls-ca " + garbage + " holds no PEM certificate"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var err error
			if tc.server {
				_, err = Server(tc.f, zap.NewNop())
			} else {
				_, err = Client(tc.f, zap.NewNop())
			}
			require.ErrorContains(t, err, tc.want)
		})
	}
}
