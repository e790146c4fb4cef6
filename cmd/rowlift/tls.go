package main

import (
	"flag"

	"go.uber.org/zap"
	"google.golang.org/grpc"

	"github.com/rowlift/rowlift/internal/grpcopt"
	"github.com/rowlift/rowlift/internal/grpctls"
	"github.com/rowlift/rowlift/internal/tlsfiles"
)

// tlsFlags are --tls-cert, --tls-key and --tls-ca, the same on every role and
// every `rowlift workflow` command.
type tlsFlags struct{ files tlsfiles.Files }

// register defines the flags, with help for a command that serves gRPC,
// dials it, or both (the coordinator, whose certificate and CA serve both).
func (f *tlsFlags) register(fs *flag.FlagSet, serves, dials bool) {
	var cert, ca string
	switch {
	case serves && dials:
		cert = "`FILE` of the PEM certificate to serve gRPC over TLS with, also presented as client certificate to the streamers (needs --tls-key)"
		ca = "`FILE` of the PEM CA certificate(s) that every client certificate must be signed by when given (mutual TLS), " +
			"and that verify the streamers' certificates"
	case serves:
		cert = "`FILE` of the PEM certificate to serve gRPC over TLS with (needs --tls-key)"
		ca = "`FILE` of the PEM CA certificate(s) that every client certificate must be signed by when given (mutual TLS)"
	default:
		cert = "`FILE` of the PEM client certificate to present to the server, for a server that requires one (needs --tls-key)"
		ca = "`FILE` of the PEM CA certificate(s) that verify the server's certificate (default: the system's CAs once any --tls-* flag is given)"
	}
	fs.StringVar(&f.files.Cert, "tls-cert", "", cert+"; plaintext when no --tls-* flag is given. "+
		"The files are read again when they change, as a rotated Kubernetes Secret does; e.g. --tls-cert /etc/rowlift/tls/tls.crt")
	fs.StringVar(&f.files.Key, "tls-key", "", "`FILE` of the PEM private key of --tls-cert, e.g. --tls-key /etc/rowlift/tls/tls.key")
	fs.StringVar(&f.files.CA, "tls-ca", "", ca+", e.g. --tls-ca /etc/rowlift/tls/ca.crt")
}

// serverOptions are the gRPC server options of a role: grpcopt's, over TLS
// when a --tls-* flag is set.
func (f *tlsFlags) serverOptions(log *zap.Logger) ([]grpc.ServerOption, error) {
	creds, err := grpctls.Server(f.files, log)
	if err != nil {
		return nil, err
	}
	return grpcopt.ServerOptions(creds), nil
}

// dialOptions are what a role's applier.Config or coordinator.Config adds to
// reach streamers over TLS, or nothing for plaintext.
func (f *tlsFlags) dialOptions(log *zap.Logger) ([]grpc.DialOption, error) {
	creds, err := grpctls.Client(f.files, log)
	if err != nil || creds == nil {
		return nil, err
	}
	return []grpc.DialOption{grpc.WithTransportCredentials(creds)}, nil
}
