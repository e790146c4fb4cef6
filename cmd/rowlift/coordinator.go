package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	"os"
	"regexp"
	"slices"
	"strings"

	"github.com/go-sql-driver/mysql"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/reflection"

	"github.com/rowlift/rowlift/coordinator"
	rowliftv1 "github.com/rowlift/rowlift/proto/rowlift/v1"
)

func coordinatorCommand() *command {
	var listen, debug string
	var raw stringList // parsed in exec: the flag package would print a bad value, password and all
	return &command{
		name:    "coordinator",
		summary: "serve the Control API: create, start, stop, resume, delete and watch workflows on the targets",
		usage:   "--target NAME=DSN [--target NAME=DSN ...] [--listen ADDR]",
		flags: func(fs *flag.FlagSet) {
			fs.StringVar(&listen, "listen", "127.0.0.1:7000", "address to serve the Control gRPC service (and gRPC health and reflection) on")
			fs.Var(&raw, "target", "target server as NAME=DSN, e.g. main=user:pass@tcp(target:3306)/; repeatable, one per target. "+
				"A workflow's target NAME picks the server whose _rowlift schema holds its state. "+
				"$ROWLIFT_TARGET takes a comma-separated list: a=DSN,b=DSN")
			debugFlag(fs, &debug)
		},
		exec: func(ctx context.Context, _ *flag.FlagSet, _ io.Writer) error {
			targets := targetFlag{}
			for _, v := range raw {
				if err := targets.add(v); err != nil {
					if v == os.Getenv("ROWLIFT_TARGET") {
						err = fmt.Errorf("$ROWLIFT_TARGET: %w", err)
					}
					return usageError{err}
				}
			}
			if len(targets) == 0 {
				return errors.New("--target NAME=DSN (or $ROWLIFT_TARGET) is required, once per target server")
			}
			log, err := newLogger()
			if err != nil {
				return err
			}
			defer log.Sync() //nolint:errcheck // nothing to do about a failed flush at exit
			stopTracing, err := startTracing(ctx, "coordinator", log)
			if err != nil {
				return err
			}
			defer stopTracing()
			srv, err := coordinator.New(coordinator.Config{Targets: targets, Logger: log})
			if err != nil {
				return err
			}
			defer srv.Close()
			go srv.Run(ctx) // finishes cutovers a dead coordinator left
			return serveRole(ctx, log, listen, debug, func(gs *grpc.Server) {
				rowliftv1.RegisterControlServer(gs, srv)
				// Serving as soon as it listens: the coordinator needs no target to
				// answer, and reports an unreachable one per request.
				hs := health.NewServer()
				hs.SetServingStatus(rowliftv1.Control_ServiceDesc.ServiceName, healthpb.HealthCheckResponse_SERVING)
				healthpb.RegisterHealthServer(gs, hs)
				reflection.Register(gs)
			}, zap.String("role", "coordinator"), zap.Strings("targets", targets.names()))
		},
	}
}

// targetFlag holds the --target NAME=DSN flags, by name.
type targetFlag map[string]string

// startsTarget matches the start of a NAME=DSN item, which tells a comma that
// separates items from one inside a DSN (a password, a parameter list).
var startsTarget = regexp.MustCompile(`^[A-Za-z0-9_-]+=`)

// add takes one NAME=DSN, or several separated by commas (as $ROWLIFT_TARGET has them).
func (f targetFlag) add(v string) error {
	var items []string
	for _, part := range strings.Split(v, ",") {
		if len(items) > 0 && !startsTarget.MatchString(part) {
			items[len(items)-1] += "," + part
			continue
		}
		items = append(items, part)
	}
	for _, item := range items {
		name, dsn, ok := strings.Cut(strings.TrimSpace(item), "=")
		if !ok || name == "" || dsn == "" {
			return fmt.Errorf("target %q: want NAME=DSN, e.g. main=user:pass@tcp(target:3306)/", redactTarget(item))
		}
		if _, dup := f[name]; dup {
			return fmt.Errorf("target %q is given twice", name)
		}
		if _, err := mysql.ParseDSN(dsn); err != nil {
			return fmt.Errorf("target %s: DSN (want user:password@tcp(host:port)/): %w", name, err)
		}
		f[name] = dsn
	}
	return nil
}

func (f targetFlag) names() []string { return slices.Sorted(maps.Keys(f)) }

// redactTarget cuts a malformed target item at its first ':' after the name,
// where a DSN's password would start.
func redactTarget(item string) string {
	if i := strings.Index(item, ":"); i >= 0 {
		return item[:i] + ":..."
	}
	return item
}
