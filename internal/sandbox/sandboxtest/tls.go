package sandboxtest

import (
	"testing"

	"github.com/rowlift/rowlift/internal/testcerts"
)

// TLSFiles are PEM files made for one test: a CA, a server certificate it
// signed for 127.0.0.1 and localhost, and a client certificate it signed.
type TLSFiles struct {
	CA, ServerCert, ServerKey, ClientCert, ClientKey string
}

// ServerArgs are the server options that make a sandbox serve TLS with these
// files and refuse connections without it (Unix socket connections count as
// secure, so the sandbox's own readiness check still works).
func (f TLSFiles) ServerArgs() []string {
	return []string{"--ssl-ca=" + f.CA, "--ssl-cert=" + f.ServerCert, "--ssl-key=" + f.ServerKey, "--require-secure-transport=ON"}
}

// MakeTLS writes a fresh CA and a server and a client certificate it signs
// (internal/testcerts, for 127.0.0.1 and localhost) into a directory removed
// when the test ends; name tells the certificates of one test apart.
func MakeTLS(t testing.TB, name string) TLSFiles {
	t.Helper()
	ca := testcerts.NewCA(t)
	srv, cli := ca.Issue(t, name+"-server"), ca.Issue(t, name+"-client")
	return TLSFiles{CA: ca.Cert, ServerCert: srv.Cert, ServerKey: srv.Key, ClientCert: cli.Cert, ClientKey: cli.Key}
}
