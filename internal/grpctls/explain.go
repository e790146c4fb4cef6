package grpctls

import "strings"

// hints map what grpc-go and crypto/tls say when a connection is refused to
// what the operator of the client must change. They match the text of the
// error, as gRPC hands the client nothing but the text.
var hints = []struct {
	// tls is whether the client used TLS when it saw this.
	tls  bool
	text string
	hint string
}{
	{true, "first record does not look like a TLS handshake",
		"the server does not serve TLS: start it with --tls-cert and --tls-key, or drop the --tls-* flags from this client"},
	{true, "tls: certificate required",
		"the server requires a client certificate: give this client --tls-cert and --tls-key, issued by the CA the server's --tls-ca names"},
	{true, "tls: unknown certificate authority",
		"the server does not trust this client's certificate: give --tls-cert and --tls-key issued by the CA the server's --tls-ca names"},
	{true, "tls: bad certificate",
		"the server refused this client's certificate: give --tls-cert and --tls-key issued by the CA the server's --tls-ca names"},
	{true, "certificate signed by unknown authority",
		"this client does not trust the server's certificate: give --tls-ca the CA that issued the server's --tls-cert"},
	{true, "certificate is valid for",
		"the server's certificate does not name the address dialled: dial a name or IP the certificate holds, or issue it with that one as a SAN"},
	{true, "certificate has expired or is not yet valid",
		"a certificate is out of its validity period: renew it (the server logs which peer it refused)"},
	{false, "error reading server preface",
		"if the server serves TLS, give this client --tls-ca (and --tls-cert and --tls-key when the server requires client certificates)"},
}

// Explain adds what to fix to a connection error whose text is msg, seen by
// a client that used TLS or not; msg stays as it is when it is no TLS failure
// it knows (or when the client's own credentials already explained it).
func Explain(msg string, usedTLS bool) string {
	for _, h := range hints {
		if h.tls == usedTLS && strings.Contains(msg, h.text) {
			return msg + "; " + h.hint
		}
	}
	return msg
}
