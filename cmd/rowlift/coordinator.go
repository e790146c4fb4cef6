package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"maps"
	"os"
	"slices"
	"strings"

	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/reflection"

	"github.com/rowlift/rowlift/coordinator"
	"github.com/rowlift/rowlift/coordinator/authz"
	"github.com/rowlift/rowlift/internal/dbconn"
	rowliftv1 "github.com/rowlift/rowlift/proto/rowlift/v1"
	"github.com/rowlift/rowlift/state"
)

func coordinatorCommand() *command {
	var listen, tokenFile, httpListen string
	// Parsed in exec: the flag package would print a bad value, password and all.
	var raw, rawFiles stringList
	var admins, readers stringList
	rf := &roleFlags{name: "coordinator", serves: true, dials: true}
	return &command{
		name:    "coordinator",
		summary: "serve the Control API: create, start, stop, resume, delete and watch workflows on the targets",
		usage:   "--target NAME=DSN | --target-file NAME=FILE [--target ... | --target-file ...] [--listen ADDR]",
		flags: func(fs *flag.FlagSet) {
			fs.StringVar(&listen, "listen", "127.0.0.1:7000", "address to serve the Control gRPC service (and gRPC health and reflection) on")
			fs.StringVar(&httpListen, "http-listen", "", httpListenHelp)
			fs.Var(&raw, "target", "target server as NAME=DSN, e.g. main=user:pass@tcp(target:3306)/; repeatable, one per target. "+
				"A workflow's target NAME picks the server whose _rowlift schema holds its state. "+
				"$ROWLIFT_TARGET takes a comma-separated list: a=DSN,b=DSN. "+dsnTLSHelp)
			fs.Var(&rawFiles, "target-file", "target server as NAME=FILE, where FILE holds the DSN (a mounted Kubernetes Secret), read at start; "+
				"repeatable, and mixes with --target, e.g. main=/etc/rowlift/main/dsn. $ROWLIFT_TARGET_FILE takes a comma-separated list: a=FILE,b=FILE")
			rf.register(fs, "once the Control service listens (it needs no target to answer, and reports an unreachable one per request); "+
				"the main port answers the same health, with rowlift.v1.Control following readiness")
			fs.StringVar(&tokenFile, "auth-token-file", "", "`FILE` of the bearer tokens the Control API accepts: "+authz.TokenFileHelp+
				". Read again when it changes. Without it and without --auth-*-identity, the Control API is open to anyone who reaches --listen")
			fs.Var(&admins, "auth-admin-identity", "client certificate `NAME` (common name or DNS name) that gets the admin role; repeatable; needs --tls-ca")
			fs.Var(&readers, "auth-read-identity", "client certificate `NAME` (common name or DNS name) that gets the read role "+
				"(show, list, watch); repeatable; needs --tls-ca")
		},
		exec: func(ctx context.Context, fs *flag.FlagSet, _ io.Writer) (err error) {
			targets := targetFlag{}
			for _, flagged := range []struct {
				name   string
				values stringList
				add    func(string) error
			}{{"target", raw, targets.add}, {"target-file", rawFiles, targets.addFiles}} {
				for _, v := range flagged.values {
					if err := flagged.add(v); err != nil {
						if env := envName(flagged.name); v == os.Getenv(env) {
							err = fmt.Errorf("$%s: %w", env, err)
						}
						return usageError{err}
					}
				}
			}
			if len(targets) == 0 {
				return usagef("--target NAME=DSN or --target-file NAME=FILE (or $ROWLIFT_TARGET, $ROWLIFT_TARGET_FILE) is required, "+
					"once per target server (see `%s --help`)", fs.Name())
			}
			auth := authz.Config{TokenFile: tokenFile, AdminIdentities: admins, ReadIdentities: readers}
			if len(admins)+len(readers) > 0 && rf.tls.files.CA == "" {
				return usagef("--auth-admin-identity and --auth-read-identity need --tls-ca: only a client certificate the coordinator verified has a name to map")
			}
			r, err := rf.start(ctx, rowliftv1.Control_ServiceDesc.ServiceName)
			if err != nil {
				return err
			}
			defer func() { err = r.end(err) }()
			var authOpts []grpc.ServerOption
			if auth.Enabled() {
				a, err := authz.New(auth, r.log)
				if err != nil {
					return err
				}
				authOpts = a.ServerOptions()
				r.server = append(r.server, authOpts...)
			} else if !authz.Loopback(listen) {
				r.log.Warn("the Control API is open to anyone who reaches --listen: give --auth-token-file or --auth-admin-identity to require credentials",
					zap.String("listen", listen))
			}
			srv, err := coordinator.New(coordinator.Config{Targets: targets, Logger: r.log, DialOptions: r.dial})
			if err != nil {
				return err
			}
			defer srv.Close()
			if httpListen != "" {
				closeConsole, err := startConsole(ctx, r, httpListen, srv, authOpts, !auth.Enabled())
				if err != nil {
					return err
				}
				defer closeConsole()
			}
			go srv.Run(ctx) // finishes cutovers a dead coordinator left
			return r.serve(ctx, listen, func(gs *grpc.Server) {
				rowliftv1.RegisterControlServer(gs, srv)
				r.probes.Register(gs)
				reflection.Register(gs)
			}, zap.String("role", "coordinator"), zap.Strings("targets", targets.names()), zap.Bool("authorization", auth.Enabled()))
		},
	}
}

// targetFlag holds the DSNs of the --target NAME=DSN and --target-file
// NAME=FILE flags, by name.
type targetFlag map[string]string

// startsTarget reports whether part starts a NAME=DSN item, which tells a
// comma that separates items from one inside a DSN (a password, a parameter
// list).
func startsTarget(part string) bool {
	name, _, ok := strings.Cut(part, "=")
	return ok && state.CheckTargetName(name) == nil
}

// add takes one NAME=DSN, or several separated by commas (as $ROWLIFT_TARGET has them).
func (f targetFlag) add(v string) error {
	var items []string
	for _, part := range strings.Split(v, ",") {
		if len(items) > 0 && !startsTarget(part) {
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
		if err := f.set(name, dsn); err != nil {
			return err
		}
	}
	return nil
}

// addFiles takes one NAME=FILE, or several separated by commas (as
// $ROWLIFT_TARGET_FILE has them), and reads each target's DSN from its file.
func (f targetFlag) addFiles(v string) error {
	for _, item := range strings.Split(v, ",") {
		name, path, ok := strings.Cut(strings.TrimSpace(item), "=")
		if !ok || name == "" || path == "" {
			return fmt.Errorf("target file %q: want NAME=FILE, e.g. main=/etc/rowlift/main/dsn", item)
		}
		dsn, err := readSecretFile("target-file", path)
		if err != nil {
			return fmt.Errorf("target %s: %w", name, err)
		}
		if err := f.set(name, dsn); err != nil {
			return err
		}
	}
	return nil
}

// set records one target's DSN once it parses; errors never quote the DSN.
func (f targetFlag) set(name, dsn string) error {
	if err := state.CheckTargetName(name); err != nil {
		return err
	}
	if _, dup := f[name]; dup {
		return fmt.Errorf("target %q is given twice", name)
	}
	if _, err := dbconn.ParseDSN(dsn); err != nil {
		return fmt.Errorf("target %s: %w", name, err)
	}
	f[name] = dsn
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
