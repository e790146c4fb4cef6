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
	"os"
	"strings"
	"time"

	"go.uber.org/zap"
	"google.golang.org/grpc"

	"github.com/rowlift/rowlift/applier"
	"github.com/rowlift/rowlift/internal/logging"
	"github.com/rowlift/rowlift/internal/metrics"
	"github.com/rowlift/rowlift/internal/probe"
	"github.com/rowlift/rowlift/internal/tracing"
	rowliftv1 "github.com/rowlift/rowlift/proto/rowlift/v1"
	"github.com/rowlift/rowlift/streamer"
)

func streamerCommand() *command {
	var listen, sourceDSN, sourceDSNFile, debug, healthAddr, metricsAddr string
	var logOpts logging.Options
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
			logFlags(fs, &logOpts)
			tf.register(fs, true, false)
		},
		exec: func(ctx context.Context, _ *flag.FlagSet, _ io.Writer) (err error) {
			dsn, err := valueOrFile("source-dsn", sourceDSN, "source-dsn-file", sourceDSNFile)
			if err != nil {
				return err
			}
			if dsn == "" {
				return errors.New("--source-dsn or --source-dsn-file (or $ROWLIFT_SOURCE_DSN, $ROWLIFT_SOURCE_DSN_FILE) is required")
			}
			log, err := newLogger(logOpts)
			if err != nil {
				return err
			}
			defer func() { err = logExit(log, err) }()
			stopTracing, err := startTracing(ctx, "streamer", log)
			if err != nil {
				return err
			}
			defer stopTracing()
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
	var logOpts logging.Options
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
			logFlags(fs, &logOpts)
			tf.register(fs, false, true)
		},
		exec: func(ctx context.Context, _ *flag.FlagSet, _ io.Writer) (err error) {
			dsn, err := valueOrFile("target-dsn", targetDSN, "target-dsn-file", targetDSNFile)
			if err != nil {
				return err
			}
			if dsn == "" {
				return errors.New("--target-dsn or --target-dsn-file (or $ROWLIFT_TARGET_DSN, $ROWLIFT_TARGET_DSN_FILE) is required")
			}
			log, err := newLogger(logOpts)
			if err != nil {
				return err
			}
			defer func() { err = logExit(log, err) }()
			stopTracing, err := startTracing(ctx, "applier", log)
			if err != nil {
				return err
			}
			defer stopTracing()
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

// loggedError is a role's failure, already logged through its logger: main
// exits 1 without printing it again in another format.
type loggedError struct{ err error }

func (e loggedError) Error() string { return e.err.Error() }
func (e loggedError) Unwrap() error { return e.err }

// logExit ends a role's logging: the error it stops with, if any, becomes
// its last log line (JSON in production, where a plain stderr line would be
// out of place), and the log is flushed.
func logExit(log *zap.Logger, err error) error {
	if err != nil {
		log.Error("stopped", zap.Error(err))
		err = loggedError{err}
	}
	_ = log.Sync() // nothing to do about a failed flush at exit
	return err
}

// logFlags defines --log-level and --log-format, which every role takes.
func logFlags(fs *flag.FlagSet, opts *logging.Options) {
	fs.StringVar(&opts.Level, "log-level", "info", "least severe log lines written: "+strings.Join(logging.Levels, ", "))
	fs.StringVar(&opts.Format, "log-format", "", "log line format: "+strings.Join(logging.Formats, " or ")+
		"; by default console when stderr is a terminal, else json (one object a line)")
}

// newLogger is a role's logger on stderr, which also carries the MySQL
// driver's own messages; a bad --log-level or --log-format is a usage error.
func newLogger(opts logging.Options) (*zap.Logger, error) {
	log, err := logging.New(opts, os.Stderr, isTerminal(os.Stderr))
	if err != nil {
		return nil, usageError{err}
	}
	logging.RouteDriver(log)
	return log, nil
}

// dsnTLSHelp is the DSN flags' note on TLS to the server.
const dsnTLSHelp = "TLS: tls=true verifies the server against the system's CAs; add tls-ca=FILE for a private CA, " +
	"tls-cert=FILE and tls-key=FILE for a client certificate, e.g. ?tls-ca=/etc/rowlift/db-ca.pem"

// startTracing exports the role's spans with OTLP when the standard OTEL_*
// environment asks for it (internal/tracing), and returns what flushes the
// spans not yet exported, which the role calls on its way out.
func startTracing(ctx context.Context, role string, log *zap.Logger) (stop func(), err error) {
	shutdown, err := tracing.Start(ctx, role, log)
	if err != nil {
		return nil, fmt.Errorf("tracing: %w", err)
	}
	return func() {
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		if err := shutdown(sctx); err != nil {
			log.Warn("tracing: spans not flushed at exit", zap.Error(err))
		}
	}, nil
}

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
