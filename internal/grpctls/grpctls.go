// Package grpctls makes the gRPC transport credentials of the --tls-* flags
// (internal/tlsfiles): a server's log one warning per refused handshake, and
// a client's take the files as they are at each handshake. Explain turns the
// TLS failures a client sees into what to fix.
package grpctls

import (
	"context"
	"errors"
	"io"
	"net"
	"sync"
	"time"

	"go.uber.org/zap"
	"google.golang.org/grpc/credentials"

	"github.com/rowlift/rowlift/internal/tlsfiles"
)

// Server returns the credentials of a server for the files, or nil (plaintext)
// when no --tls-* flag is set.
func Server(f tlsfiles.Files, log *zap.Logger) (credentials.TransportCredentials, error) {
	if !f.Enabled() {
		return nil, nil
	}
	cfg, err := tlsfiles.Server(f, log)
	if err != nil {
		return nil, err
	}
	return &serverCreds{TransportCredentials: credentials.NewTLS(cfg), log: log, limit: &limiter{}}, nil
}

// Client returns the credentials of a client for the files, or nil
// (plaintext) when no --tls-* flag is set.
func Client(f tlsfiles.Files, log *zap.Logger) (credentials.TransportCredentials, error) {
	if !f.Enabled() {
		return nil, nil
	}
	cfg, err := tlsfiles.Client(f, log)
	if err != nil {
		return nil, err
	}
	return &clientCreds{TransportCredentials: credentials.NewTLS(cfg().Config), handshake: cfg}, nil
}

// serverCreds are TLS server credentials that log refused handshakes.
type serverCreds struct {
	credentials.TransportCredentials
	log   *zap.Logger
	limit *limiter
}

// ServerHandshake logs a refused handshake with the peer and the reason
// (a client without a certificate, one from another CA, plaintext): that
// line is where the operator of the server learns who was turned away.
func (c *serverCreds) ServerHandshake(conn net.Conn) (net.Conn, credentials.AuthInfo, error) {
	out, info, err := c.TransportCredentials.ServerHandshake(conn)
	// A peer that closes before saying anything (a TCP probe) was not refused.
	if err != nil && !errors.Is(err, io.EOF) {
		if ok, suppressed := c.limit.allow(time.Now()); ok {
			c.log.Warn("refused a TLS handshake", zap.String("peer", conn.RemoteAddr().String()), zap.Error(err),
				zap.Int("suppressed_before", suppressed))
		}
	}
	return out, info, err
}

// Clone keeps the logging.
func (c *serverCreds) Clone() credentials.TransportCredentials {
	return &serverCreds{TransportCredentials: c.TransportCredentials.Clone(), log: c.log, limit: c.limit}
}

// clientCreds are TLS client credentials whose configuration is taken anew
// for each handshake, so rotated files apply to the next connection.
type clientCreds struct {
	credentials.TransportCredentials
	handshake func() *tlsfiles.Handshake
}

// ClientHandshake shakes hands with the configuration of the files as they
// are now, and fails when the server showed it will refuse the certificate.
func (c *clientCreds) ClientHandshake(ctx context.Context, authority string, conn net.Conn) (net.Conn, credentials.AuthInfo, error) {
	h := c.handshake()
	out, info, err := credentials.NewTLS(h.Config).ClientHandshake(ctx, authority, conn)
	if err == nil && h.Refusal() != nil {
		out.Close()
		return nil, nil, h.Refusal()
	}
	return out, info, err
}

// Clone keeps the reloading (the embedded credentials' Clone would drop it).
func (c *clientCreds) Clone() credentials.TransportCredentials {
	return &clientCreds{TransportCredentials: c.TransportCredentials.Clone(), handshake: c.handshake}
}

// logBurst refused handshakes are logged per logWindow at most: a client
// retrying in a loop, or a scanner, must not flood the log.
const (
	logBurst  = 10
	logWindow = time.Minute
)

// limiter allows logBurst events per logWindow and counts the rest.
type limiter struct {
	mu         sync.Mutex
	start      time.Time
	n          int
	suppressed int
}

// allow reports whether the event at now may be logged, and how many were
// not since the last one that was.
func (l *limiter) allow(now time.Time) (ok bool, suppressed int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if now.Sub(l.start) >= logWindow {
		l.start, l.n = now, 0
	}
	if l.n >= logBurst {
		l.suppressed++
		return false, 0
	}
	l.n++
	suppressed, l.suppressed = l.suppressed, 0
	return true, suppressed
}
