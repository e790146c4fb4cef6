package authz

import (
	"context"
	"errors"
	"net"
	"strings"
)

// Bearer is the per-RPC credentials of a client holding a token: it sends
// "authorization: Bearer TOKEN" with every call.
type Bearer struct{ token string }

// NewBearer takes a client's token, as its token file holds it: the token
// alone, on one line (surrounding spaces are dropped).
func NewBearer(token string) (Bearer, error) {
	token = strings.TrimSpace(token)
	switch {
	case token == "":
		return Bearer{}, errors.New("the token is empty")
	case strings.ContainsAny(token, " \t\r\n"):
		return Bearer{}, errors.New("the file must hold the token alone, on one line " +
			"(a coordinator's --auth-token-file, with its \"ROLE TOKEN\" lines, is not one)")
	}
	return Bearer{token: token}, nil
}

// GetRequestMetadata adds the token to a call.
func (b Bearer) GetRequestMetadata(context.Context, ...string) (map[string]string, error) {
	return map[string]string{"authorization": "Bearer " + b.token}, nil
}

// RequireTransportSecurity is false: the CLI decides itself (CheckPlaintext),
// as a token over plaintext to a coordinator on the same host is fine.
func (b Bearer) RequireTransportSecurity() bool { return false }

// CheckPlaintext refuses to send a token in plaintext to addr unless addr is
// on this host (loopback) or allow says the operator accepts it.
func CheckPlaintext(addr string, allow bool) error {
	if allow || Loopback(addr) {
		return nil
	}
	return errPlaintextToken
}

// Loopback reports whether addr (host:port) is on this host only: a loopback
// IP or localhost. An empty host (every interface) is not.
func Loopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		host = addr
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// errPlaintextToken refuses to send a token where anyone on the path can read it.
var errPlaintextToken = errors.New("refusing to send --token-file's token in plaintext to a coordinator that is not on this host: " +
	"give --tls-ca (the coordinator serving TLS), or --allow-plaintext-token to send it anyway")
