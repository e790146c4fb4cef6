package grpctls

import (
	"strconv"
	"strings"
)

// hints map what grpc-go and crypto/tls say when a connection is refused to
// what the operator of the client must change. They match the text of the
// error, as gRPC hands the client nothing but the text.
var hints = []struct{ text, hint string }{
	{"first record does not look like a TLS handshake",
		"the server does not serve TLS: start it with --tls-cert and --tls-key, or drop the --tls-* flags from this client"},
	{"tls: certificate required",
		"the server requires a client certificate: give this client --tls-cert and --tls-key, issued by the CA the server's --tls-ca names"},
	{"tls: unknown certificate authority",
		"the server does not trust this client's certificate: give --tls-cert and --tls-key issued by the CA the server's --tls-ca names"},
	{"tls: bad certificate",
		"the server refused this client's certificate: give --tls-cert and --tls-key issued by the CA the server's --tls-ca names"},
	{"certificate signed by unknown authority",
		"this client does not trust the server's certificate: give --tls-ca the CA that issued the server's --tls-cert"},
	{"certificate is valid for",
		"the server's certificate does not name the address dialled: dial a name or IP the certificate holds, or issue it with that one as a SAN"},
	{"certificate has expired or is not yet valid",
		"a certificate is out of its validity period: renew it (the server logs which peer it refused)"},
	{"error reading server preface",
		"the server closed the connection before gRPC began: a server with --tls-cert refuses plaintext clients (give this client --tls-ca), " +
			"and one with --tls-ca refuses clients without a certificate it accepts (its log says why)"},
}

// Explain returns a connection error's text msg as an operator should read
// it: without grpc-go's quoting (connection error: desc = "..."), and with
// what to fix when it is a TLS failure it knows (not when the client's own
// credentials already said it).
func Explain(msg string) string {
	if desc, ok := strings.CutPrefix(msg, "connection error: desc = "); ok {
		if unquoted, err := strconv.Unquote(desc); err == nil {
			msg = unquoted
		}
	}
	if h := hint(msg); h != "" {
		return msg + "; " + h
	}
	return msg
}

// IsTLS reports whether msg is a TLS failure Explain says what to fix for,
// as opposed to, say, nothing listening at the address.
func IsTLS(msg string) bool { return hint(msg) != "" }

// hint is what to fix for msg, or "".
func hint(msg string) string {
	for _, h := range hints {
		if strings.Contains(msg, h.text) {
			return h.hint
		}
	}
	return ""
}
