package main

import (
	"context"
	"crypto/tls"

	"go.uber.org/zap"
	"google.golang.org/grpc"

	"github.com/rowlift/rowlift/coordinator/authz"
	"github.com/rowlift/rowlift/coordinator/console"
	"github.com/rowlift/rowlift/internal/tlsfiles"
	rowliftv1 "github.com/rowlift/rowlift/proto/rowlift/v1"
)

// httpListenHelp is --http-listen's help.
const httpListenHelp = "`ADDR` to serve the web console on, e.g. 127.0.0.1:7080; off when empty. It serves HTTPS with the --tls-* " +
	"files when given (and then requires a client certificate, as the Control API does, when --tls-ca is set), and every page and action " +
	"is a Control API call with the token the browser signs in with and the client certificate it presents, so it may do what they " +
	"may do with rowlift workflow (a certificate's role comes from --auth-admin-identity and --auth-read-identity)"

// startConsole listens on addr and serves the web console over control,
// through authOpts (the Control API's authorization interceptors), until ctx
// ends. A failure after the start is logged: the Control API serves on.
func startConsole(ctx context.Context, r *running, addr string, control rowliftv1.ControlServer, authOpts []grpc.ServerOption, open bool) (func(), error) {
	var tlsConfig *tls.Config
	if r.tls.Enabled() {
		var err error
		if tlsConfig, err = tlsfiles.Server(r.tls, r.log); err != nil {
			return nil, err
		}
	}
	lis, err := console.Listen(addr, tlsConfig)
	if err != nil {
		return nil, err
	}
	c, err := console.New(console.Config{Control: control, ServerOptions: authOpts, Logger: r.log})
	if err != nil {
		lis.Close()
		return nil, err
	}
	if open && !authz.Loopback(addr) {
		r.log.Warn("the web console is open to anyone who reaches --http-listen: give --auth-token-file to require a token",
			zap.String("http_listen", addr))
	}
	r.log.Info("serving the web console", zap.String("http_listen", lis.Addr().String()), zap.Bool("tls", tlsConfig != nil))
	go c.Run(ctx)
	go func() {
		if err := c.Serve(ctx, lis); err != nil {
			r.log.Error("the web console stopped", zap.Error(err))
		}
	}()
	return c.Close, nil
}
