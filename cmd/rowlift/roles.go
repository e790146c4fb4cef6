package main

import (
	"context"
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
	"github.com/rowlift/rowlift/internal/nice"
	"github.com/rowlift/rowlift/internal/probe"
	"github.com/rowlift/rowlift/internal/tlsfiles"
	"github.com/rowlift/rowlift/internal/tracing"
	rowliftv1 "github.com/rowlift/rowlift/proto/rowlift/v1"
	"github.com/rowlift/rowlift/streamer"
)

func streamerCommand() *command {
	var listen, sourceDSN, sourceDSNFile string
	rf := &roleFlags{name: "streamer", serves: true, yields: true}
	return &command{
		name:    "streamer",
		summary: "serve the source side: copy chunks and binlog on one gRPC stream per workflow",
		usage:   "--source-dsn DSN | --source-dsn-file FILE [--listen ADDR]",
		flags: func(fs *flag.FlagSet) {
			fs.StringVar(&listen, "listen", "127.0.0.1:7001", "address to serve the Streamer gRPC service on")
			fs.StringVar(&sourceDSN, "source-dsn", "", "go-sql-driver DSN of the source server, e.g. user:pass@tcp(host:3306)/. "+dsnTLSHelp)
			fs.StringVar(&sourceDSNFile, "source-dsn-file", "", "file holding the source DSN instead of --source-dsn (a mounted Kubernetes Secret), read at start")
			rf.register(fs, "once the Streamer service listens (a source it cannot reach is reported on each stream, where the applier shows it)")
		},
		exec: func(ctx context.Context, fs *flag.FlagSet, _ io.Writer) (err error) {
			dsn, err := valueOrFile("source-dsn", sourceDSN, "source-dsn-file", sourceDSNFile)
			if err != nil {
				return err
			}
			if dsn == "" {
				return usagef("--source-dsn or --source-dsn-file (or $ROWLIFT_SOURCE_DSN, $ROWLIFT_SOURCE_DSN_FILE) is required (see `%s --help`)", fs.Name())
			}
			r, err := rf.start(ctx)
			if err != nil {
				return err
			}
			defer func() { err = r.end(err) }()
			srv, err := streamer.New(streamer.Config{SourceDSN: dsn, Logger: r.log})
			if err != nil {
				return err
			}
			defer srv.Close()
			return r.serve(ctx, listen, func(gs *grpc.Server) { rowliftv1.RegisterStreamerServer(gs, srv) }, zap.String("role", "streamer"))
		},
	}
}

func applierCommand() *command {
	var targetDSN, targetDSNFile string
	var poll time.Duration
	rf := &roleFlags{name: "applier", dials: true, yields: true}
	return &command{
		name:    "applier",
		summary: "run the target side: apply every workflow recorded in the target's _rowlift schema",
		usage:   "--target-dsn DSN | --target-dsn-file FILE [--poll-interval D]",
		flags: func(fs *flag.FlagSet) {
			fs.StringVar(&targetDSN, "target-dsn", "", "go-sql-driver DSN of the target server, e.g. user:pass@tcp(host:3306)/. "+dsnTLSHelp)
			fs.StringVar(&targetDSNFile, "target-dsn-file", "", "file holding the target DSN instead of --target-dsn (a mounted Kubernetes Secret), read at start")
			fs.DurationVar(&poll, "poll-interval", applier.DefaultPollInterval, "how often to look for new, started or stopped workflows")
			rf.register(fs, "while it holds the target's applier lock or stands by behind another applier's, not while it cannot reach or read the target")
		},
		exec: func(ctx context.Context, fs *flag.FlagSet, _ io.Writer) (err error) {
			dsn, err := valueOrFile("target-dsn", targetDSN, "target-dsn-file", targetDSNFile)
			if err != nil {
				return err
			}
			if dsn == "" {
				return usagef("--target-dsn or --target-dsn-file (or $ROWLIFT_TARGET_DSN, $ROWLIFT_TARGET_DSN_FILE) is required (see `%s --help`)", fs.Name())
			}
			r, err := rf.start(ctx)
			if err != nil {
				return err
			}
			defer func() { err = r.end(err) }()
			engine, err := applier.New(applier.Config{TargetDSN: dsn, Logger: r.log, PollInterval: poll, Ready: r.probes.SetReady, DialOptions: r.dial})
			if err != nil {
				return err
			}
			r.log.Info("applier running")
			return engine.Run(ctx)
		},
	}
}

// roleFlags are the flags every long-running role (streamer, applier,
// coordinator) takes beside its own: logs, Go profiles, health probes,
// metrics, and the TLS of its gRPC hops.
type roleFlags struct {
	name                   string
	debug, health, metrics string
	log                    logging.Options
	tls                    tlsFlags
	// serves and dials say which ends of gRPC hops the role is: the TLS flags'
	// help and the credentials start builds follow them.
	serves, dials bool
	// yields marks the roles that do the copy and the replay, which run at
	// the nice value niceness (--nice) so a server on their host goes first.
	yields   bool
	niceness int
}

// defaultNice is the streamer's and the applier's nice value unless --nice
// says otherwise: the lowest priority, so the database servers they share a
// host with are never held back by them.
const defaultNice = nice.Max

// register defines the flags; ready says when the role's health reports it ready.
func (f *roleFlags) register(fs *flag.FlagSet, ready string) {
	debugFlag(fs, &f.debug)
	healthFlag(fs, &f.health, ready)
	metricsFlag(fs, &f.metrics)
	logFlags(fs, &f.log)
	f.tls.register(fs, f.serves, f.dials)
	if f.yields {
		fs.IntVar(&f.niceness, "nice", defaultNice, fmt.Sprintf("CPU priority of every thread of the %s, as a nice value from 0 (normal) to %d (lowest): "+
			"a database server on the same host, and its application, go first; within a container's own CPU share it changes nothing", f.name, nice.Max))
	}
}

// running is a role set up from its flags.
type running struct {
	log    *zap.Logger
	probes *probe.Server
	// server and dial are the role's gRPC server options and what it adds to
	// reach streamers, over TLS when the flags ask for it.
	server []grpc.ServerOption
	dial   []grpc.DialOption
	tls    tlsfiles.Files
	// stops undo what start did, in reverse order.
	stops []func()
}

// start sets the role up, each step able to log its failure: the logger,
// tracing, the TLS credentials (files that cannot work refuse the start
// before any port is bound), metrics, Go profiles and the probe server, whose
// health mirrors answers beside liveness and readiness.
func (f *roleFlags) start(ctx context.Context, mirrors ...string) (*running, error) {
	if err := nice.Check(f.niceness); f.yields && err != nil {
		return nil, usagef("--nice %v; the default is %d", err, defaultNice)
	}
	log, err := newLogger(f.log)
	if err != nil {
		return nil, err
	}
	r := &running{log: log, tls: f.tls.files}
	if err := r.setUp(ctx, f, mirrors); err != nil {
		return nil, r.end(err)
	}
	return r, nil
}

func (r *running) setUp(ctx context.Context, f *roleFlags, mirrors []string) error {
	if f.yields && f.niceness > 0 {
		if err := nice.Set(os.Getpid(), f.niceness); err != nil {
			// Only the database's share of the CPU is at stake: run on.
			r.log.Warn("cannot lower the CPU priority; running at normal priority", zap.Int("nice", f.niceness), zap.Error(err))
		}
	}
	stopTracing, err := startTracing(ctx, f.name, r.log)
	if err != nil {
		return err
	}
	r.stops = append(r.stops, stopTracing)
	if f.serves {
		if r.server, err = f.tls.serverOptions(r.log); err != nil {
			return err
		}
	}
	if f.dials {
		if r.dial, err = f.tls.dialOptions(r.log); err != nil {
			return err
		}
	}
	if err := metrics.Serve(ctx, f.metrics, metrics.BuildInfo{Role: f.name, Version: buildVersion(), Revision: buildRevision()}, r.log); err != nil {
		return err
	}
	serveDebug(f.debug, r.log)
	if r.probes, err = probe.Start(ctx, f.health, r.log, mirrors...); err != nil {
		return err
	}
	r.stops = append(r.stops, r.probes.Close)
	return nil
}

// end undoes start; err, the error the role stops with, becomes its last log
// line (JSON in production, where a plain stderr line would be out of place),
// and main exits 1 without printing it again.
func (r *running) end(err error) error {
	for i := len(r.stops) - 1; i >= 0; i-- {
		r.stops[i]()
	}
	if err != nil {
		r.log.Error("stopped", zap.Error(err))
		err = loggedError{err}
	}
	_ = r.log.Sync() // nothing to do about a failed flush at exit
	return err
}

// serve serves the role's gRPC services on listen until ctx ends; the role is
// ready once it listens. fields describe the role in the "serving" log line.
func (r *running) serve(ctx context.Context, listen string, register func(*grpc.Server), fields ...zap.Field) error {
	lis, err := net.Listen("tcp", listen)
	if err != nil {
		return fmt.Errorf("listen on %s: %w", listen, err)
	}
	gs := grpc.NewServer(r.server...)
	register(gs)
	r.log.Info("serving", append(fields, zap.String("listen", lis.Addr().String()),
		zap.Bool("tls", r.tls.Enabled()), zap.Bool("client_certificates_required", r.tls.CA != ""))...)
	r.probes.SetReady(true)
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
