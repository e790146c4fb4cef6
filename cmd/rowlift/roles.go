package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	_ "net/http/pprof" // registers /debug/pprof on the default mux
	"time"

	"go.uber.org/zap"
	"google.golang.org/grpc"

	"github.com/rowlift/rowlift/applier"
	"github.com/rowlift/rowlift/internal/metrics"
	"github.com/rowlift/rowlift/internal/probe"
	rowliftv1 "github.com/rowlift/rowlift/proto/rowlift/v1"
	"github.com/rowlift/rowlift/streamer"
)

func streamerCommand() *command {
	var listen, sourceDSN, sourceDSNFile, debug, healthAddr, metricsAddr string
	var tf tlsFlags
	return &command{
		name:    "streamer",
		summary: "serve the source side: copy chunks and binlog on one gRPC stream per workflow",
		usage:   "--source-dsn DSN | --source-dsn-file FILE [--listen ADDR]",
		flags: func(fs *flag.FlagSet) {
			fs.StringVar(&listen, "listen", "127.0.0.1:7001", "address to serve the Streamer gRPC service on")
			fs.StringVar(&sourceDSN, "source-dsn", "", "go-sql-driver DSN of the source server, e.g. user:pass@tcp(host:3306)/. "+dsnTLSHelp)
			fs.StringVar(&sourceDSNFile, "source-dsn-file", "", "file holding the source DSN instead of --source-dsn (a mounted Kubernetes Secret), read at start")
			debugFlag(fs, &debug)
			healthFlag(fs, &healthAddr, "once the Streamer service listens (a source it cannot reach is reported on each stream, where the applier shows it)")
			metricsFlag(fs, &metricsAddr)
			tf.register(fs, true, false)
		},
		exec: func(ctx context.Context, _ *flag.FlagSet, _ io.Writer) error {
			dsn, err := valueOrFile("source-dsn", sourceDSN, "source-dsn-file", sourceDSNFile)
			if err != nil {
				return err
			}
			if dsn == "" {
				return errors.New("--source-dsn or --source-dsn-file (or $ROWLIFT_SOURCE_DSN, $ROWLIFT_SOURCE_DSN_FILE) is required")
			}
			log, err := newLogger()
			if err != nil {
				return err
			}
			defer log.Sync() //nolint:errcheck // nothing to do about a failed flush at exit
			opts, err := tf.serverOptions(log)
			if err != nil {
				return err
			}
			if err := metrics.Serve(ctx, metricsAddr, log); err != nil {
				return err
			}
			probes, err := probe.Start(ctx, healthAddr, log)
			if err != nil {
				return err
			}
			defer probes.Close()
			srv, err := streamer.New(streamer.Config{SourceDSN: dsn, Logger: log})
			if err != nil {
				return err
			}
			defer srv.Close()
			return serveRole(ctx, log, listen, debug, opts, probes, func(gs *grpc.Server) { rowliftv1.RegisterStreamerServer(gs, srv) },
				zap.String("role", "streamer"), zap.Bool("tls", tf.files.Enabled()), zap.Bool("client_certificates_required", tf.files.CA != ""))
		},
	}
}

func applierCommand() *command {
	var targetDSN, targetDSNFile, debug, healthAddr, metricsAddr string
	var poll time.Duration
	var tf tlsFlags
	return &command{
		name:    "applier",
		summary: "run the target side: apply every workflow recorded in the target's _rowlift schema",
		usage:   "--target-dsn DSN | --target-dsn-file FILE [--poll-interval D]",
		flags: func(fs *flag.FlagSet) {
			fs.StringVar(&targetDSN, "target-dsn", "", "go-sql-driver DSN of the target server, e.g. user:pass@tcp(host:3306)/. "+dsnTLSHelp)
			fs.StringVar(&targetDSNFile, "target-dsn-file", "", "file holding the target DSN instead of --target-dsn (a mounted Kubernetes Secret), read at start")
			fs.DurationVar(&poll, "poll-interval", applier.DefaultPollInterval, "how often to look for new, started or stopped workflows")
			debugFlag(fs, &debug)
			healthFlag(fs, &healthAddr, "while it holds the target's applier lock or stands by behind another applier's, "+
				"not while it cannot reach or read the target")
			metricsFlag(fs, &metricsAddr)
			tf.register(fs, false, true)
		},
		exec: func(ctx context.Context, _ *flag.FlagSet, _ io.Writer) error {
			dsn, err := valueOrFile("target-dsn", targetDSN, "target-dsn-file", targetDSNFile)
			if err != nil {
				return err
			}
			if dsn == "" {
				return errors.New("--target-dsn or --target-dsn-file (or $ROWLIFT_TARGET_DSN, $ROWLIFT_TARGET_DSN_FILE) is required")
			}
			log, err := newLogger()
			if err != nil {
				return err
			}
			defer log.Sync() //nolint:errcheck // nothing to do about a failed flush at exit
			dial, err := tf.dialOptions(log)
			if err != nil {
				return err
			}
			if err := metrics.Serve(ctx, metricsAddr, log); err != nil {
				return err
			}
			probes, err := probe.Start(ctx, healthAddr, log)
			if err != nil {
				return err
			}
			defer probes.Close()
			engine, err := applier.New(applier.Config{TargetDSN: dsn, Logger: log, PollInterval: poll, Ready: probes.SetReady, DialOptions: dial})
			if err != nil {
				return err
			}
			serveDebug(debug, log)
			log.Info("applier running")
			return engine.Run(ctx)
		},
	}
}

// serveRole serves a role's gRPC services with opts on listen until ctx ends,
// and Go profiles on debug; the role is ready once it listens. fields describe
// the role in the "serving" log line.
func serveRole(ctx context.Context, log *zap.Logger, listen, debug string, opts []grpc.ServerOption, probes *probe.Server,
	register func(*grpc.Server), fields ...zap.Field) error {
	serveDebug(debug, log)
	lis, err := net.Listen("tcp", listen)
	if err != nil {
		return fmt.Errorf("listen on %s: %w", listen, err)
	}
	gs := grpc.NewServer(opts...)
	register(gs)
	log.Info("serving", append(fields, zap.String("listen", lis.Addr().String()))...)
	probes.SetReady(true)
	return serveUntilDone(ctx, gs, lis)
}

// serveUntilDone serves until ctx ends, then stops gracefully: open streams are
// cancelled, and their appliers resume from committed state on reconnect.
func serveUntilDone(ctx context.Context, gs *grpc.Server, lis net.Listener) error {
	errc := make(chan error, 1)
	go func() { errc <- gs.Serve(lis) }()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
		gs.Stop()
		return nil
	}
}

func newLogger() (*zap.Logger, error) {
	cfg := zap.NewProductionConfig()
	cfg.Sampling = nil
	return cfg.Build()
}

// dsnTLSHelp is the DSN flags' note on TLS to the server.
const dsnTLSHelp = "TLS: tls=true verifies the server against the system's CAs; add tls-ca=FILE for a private CA, " +
	"tls-cert=FILE and tls-key=FILE for a client certificate, e.g. ?tls-ca=/etc/rowlift/db-ca.pem"

func debugFlag(fs *flag.FlagSet, addr *string) {
	fs.StringVar(addr, "debug-listen", "", "address to serve Go profiles on (/debug/pprof/), e.g. 127.0.0.1:6060; off when empty")
}

// healthFlag defines --health-listen; ready says when the role is ready.
func healthFlag(fs *flag.FlagSet, addr *string, ready string) {
	fs.StringVar(addr, "health-listen", "", "address of a plaintext gRPC server with only grpc.health.v1, for Kubernetes gRPC probes "+
		"(which cannot present a client certificate), e.g. 0.0.0.0:8086; off when empty. "+
		"Service \"\" (liveness) is SERVING while the process runs; service \"readiness\" is SERVING "+ready+"; "+
		"every service turns NOT_SERVING when shutdown begins")
}

func metricsFlag(fs *flag.FlagSet, addr *string) {
	fs.StringVar(addr, "metrics-listen", "", "address to serve Prometheus metrics on (/metrics), e.g. 0.0.0.0:9090; off when empty")
}

// serveDebug serves net/http/pprof, so an operator can see where a slow copy's CPU
// goes without restarting anything.
func serveDebug(addr string, log *zap.Logger) {
	if addr == "" {
		return
	}
	go func() {
		log.Info("debug server listening", zap.String("addr", addr))
		if err := http.ListenAndServe(addr, nil); err != nil {
			log.Error("debug server stopped", zap.Error(err))
		}
	}()
}
