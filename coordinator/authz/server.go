package authz

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"

	"github.com/rowlift/rowlift/internal/reloadfile"
)

// Config is what the coordinator's --auth-* flags give.
type Config struct {
	// TokenFile is the path of the token file (see TokenFileHelp); "" for none.
	TokenFile string
	// AdminIdentities and ReadIdentities are client certificate names (CN or
	// DNS SAN) that get the admin and the read role.
	AdminIdentities, ReadIdentities []string
}

// Enabled reports whether any credential is configured: otherwise the API
// stays open, as before authorization existed.
func (c Config) Enabled() bool {
	return c.TokenFile != "" || len(c.AdminIdentities) > 0 || len(c.ReadIdentities) > 0
}

// Authorizer checks every call of a gRPC server against the configured
// credentials. The token file is read again when it changes.
type Authorizer struct {
	tokens     *reloadfile.Value[[]Token] // nil without a token file
	identities map[string]Role
	log        *zap.Logger
}

// New reads the token file and checks the identities.
func New(c Config, log *zap.Logger) (*Authorizer, error) {
	a := &Authorizer{identities: map[string]Role{}, log: log}
	for _, ids := range []struct {
		flag  string
		names []string
		role  Role
	}{{"--auth-admin-identity", c.AdminIdentities, Admin}, {"--auth-read-identity", c.ReadIdentities, Read}} {
		for _, name := range ids.names {
			if name == "" {
				return nil, fmt.Errorf("%s: empty name: give a client certificate's common name or DNS name", ids.flag)
			}
			if r, dup := a.identities[name]; dup {
				return nil, fmt.Errorf("%s %s: the name already has the %s role: give each identity one role", ids.flag, name, r)
			}
			a.identities[name] = ids.role
		}
	}
	if c.TokenFile != "" {
		var err error
		if a.tokens, err = reloadfile.New("token file", log, func() ([]Token, error) { return readTokens(c.TokenFile) }, c.TokenFile); err != nil {
			return nil, err
		}
	}
	return a, nil
}

// ServerOptions are the interceptors that check each call, unary and streaming.
func (a *Authorizer) ServerOptions() []grpc.ServerOption {
	return []grpc.ServerOption{
		grpc.ChainUnaryInterceptor(func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
			if err := a.authorize(ctx, info.FullMethod); err != nil {
				return nil, err
			}
			return handler(ctx, req)
		}),
		grpc.ChainStreamInterceptor(func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
			if err := a.authorize(ss.Context(), info.FullMethod); err != nil {
				return err
			}
			return handler(srv, ss)
		}),
	}
}

// authorize decides on the call and logs a refusal.
func (a *Authorizer) authorize(ctx context.Context, method string) error {
	caller, err := callerOf(ctx)
	if err == nil {
		p := Policy{Identities: a.identities}
		if a.tokens != nil {
			p.Tokens = a.tokens.Get()
		}
		err = Decide(p, method, caller)
	}
	if err != nil {
		fields := []zap.Field{zap.String("method", method), zap.String("code", status.Code(err).String()),
			zap.String("reason", status.Convert(err).Message())}
		if pr, ok := peer.FromContext(ctx); ok {
			fields = append(fields, zap.String("peer", pr.Addr.String()))
		}
		a.log.Warn("refused a Control API call", fields...)
	}
	return err
}

// callerOf gathers the credentials of a call: the bearer token and the names
// of a client certificate the TLS handshake verified.
func callerOf(ctx context.Context) (Caller, error) {
	var c Caller
	if vals := metadata.ValueFromIncomingContext(ctx, "authorization"); len(vals) > 0 {
		scheme, token, ok := strings.Cut(vals[0], " ")
		if len(vals) > 1 || !ok || !strings.EqualFold(scheme, "Bearer") || strings.TrimSpace(token) == "" {
			return c, status.Error(codes.Unauthenticated, "the authorization header must be one \"Bearer TOKEN\"")
		}
		c.Token = strings.TrimSpace(token)
	}
	if pr, ok := peer.FromContext(ctx); ok {
		if info, ok := pr.AuthInfo.(credentials.TLSInfo); ok && len(info.State.VerifiedChains) > 0 {
			leaf := info.State.VerifiedChains[0][0]
			for _, name := range append([]string{leaf.Subject.CommonName}, leaf.DNSNames...) {
				if name != "" && !slices.Contains(c.Names, name) {
					c.Names = append(c.Names, name)
				}
			}
		}
	}
	return c, nil
}
