package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
	"time"

	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	"github.com/rowlift/rowlift/coordinator/authz"
	"github.com/rowlift/rowlift/internal/grpcopt"
	"github.com/rowlift/rowlift/internal/grpctls"
	"github.com/rowlift/rowlift/internal/statustext"
	rowliftv1 "github.com/rowlift/rowlift/proto/rowlift/v1"
)

// workflowCommand is `rowlift workflow`: the operator's client of the coordinator's
// Control API. It keeps no state; every command is one or two RPCs.
func workflowCommand() *command {
	return &command{
		name:    "workflow",
		summary: "create, start, stop, resume, rewind, delete, show, list, watch, verify, switch, reverse, complete and cancel workflows through the coordinator",
		subs: []*command{
			workflowCreateCommand(),
			workflowRefCommand("start", "begin the copy of a created workflow", "started", startWorkflow),
			workflowRefCommand("stop", "stop streaming and applying; committed progress is kept", "stopped", stopWorkflow),
			workflowRefCommand("resume", "continue a stopped or failed workflow from its committed state", "resumed", resumeWorkflow),
			workflowRefCommand("rewind", "continue a workflow whose source lost transactions the target applied (a failover that lost writes) "+
				"from the last position the source has, and repair the rows they changed with a verify --repair", "rewound", rewindWorkflow),
			workflowDeleteCommand(),
			workflowShowCommand(),
			workflowListCommand(),
			workflowWatchCommand(),
			workflowVerifyCommand(),
			workflowSwitchCommand("switch"),
			workflowSwitchCommand("reverse"),
			workflowCompleteCommand(),
			workflowCancelCommand(),
		},
	}
}

// clientFlags are the flags every `rowlift workflow` command shares.
type clientFlags struct {
	coordinator string
	output      string
	config      string
	timeout     time.Duration
	tls         tlsFlags
	tokenFile   string
	// plaintextToken allows sending the token without TLS to another host.
	plaintextToken bool
}

func (c *clientFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&c.coordinator, "coordinator", "127.0.0.1:7000",
		"`ADDR` (host:port) of the coordinator's Control API (rowlift coordinator --listen), e.g. --coordinator 10.0.0.9:7000")
	fs.StringVar(&c.output, "output", "text",
		"output `FORMAT`: text for people, json for scripts (protojson; watch prints one object per line), e.g. --output json")
	fs.StringVar(&c.config, "config", "",
		"`PATH` of a config file of \"flag = value\" lines (e.g. \"coordinator = 10.0.0.9:7000\"); a flag on the command line or in $ROWLIFT_<FLAG>\n"+
			"wins over the file. Default $XDG_CONFIG_HOME/rowlift/config, else ~/.config/rowlift/config, when present, e.g. --config ./prod.conf")
	fs.DurationVar(&c.timeout, "timeout", time.Minute,
		"how long to wait for the coordinator's answer (watch: its first update), e.g. --timeout 5m for a create that checks many tables")
	c.tls.register(fs, false, true)
	fs.StringVar(&c.tokenFile, "token-file", "",
		"`FILE` holding the bearer token (alone) to send with every call, for a coordinator with --auth-token-file, e.g. --token-file ~/.rowlift-token")
	fs.BoolVar(&c.plaintextToken, "allow-plaintext-token", false,
		"send --token-file's token to a coordinator on another host without TLS, where anyone on the path can read it, "+
			"e.g. --allow-plaintext-token on a network you trust")
}

// dialOptions are the gRPC options that reach the coordinator as the flags say:
// over TLS when a --tls-* flag is set, with the token of --token-file.
func (c *clientFlags) dialOptions() ([]grpc.DialOption, error) {
	creds, err := grpctls.Client(c.tls.files, zap.NewNop())
	if err != nil {
		return nil, usageError{err}
	}
	opts := grpcopt.DialOptions(creds)
	if c.tokenFile == "" {
		return opts, nil
	}
	secret, err := readSecretFile("token-file", c.tokenFile)
	if err != nil {
		return nil, usageError{err}
	}
	token, err := authz.NewBearer(secret)
	if err != nil {
		return nil, usagef("--token-file %s: %w", c.tokenFile, err)
	}
	if creds == nil {
		if err := authz.CheckPlaintext(c.coordinator, c.plaintextToken); err != nil {
			return nil, usageError{err}
		}
	}
	return append(opts, grpc.WithPerRPCCredentials(token)), nil
}

// session is one command's connection to the coordinator.
type session struct {
	flags  *clientFlags
	conn   *grpc.ClientConn
	client rowliftv1.ControlClient
	stdout io.Writer
	// stderr takes warnings that do not fail the command.
	stderr io.Writer
}

// workflowLeaf builds a `rowlift workflow` subcommand: the shared client flags, the
// config file, the positional arguments (nargs of them) and the connection to the
// coordinator, then run. Flags may follow the positional arguments, as in
// `rowlift workflow show orders --output json`.
func workflowLeaf(name, summary, usage string, nargs int, flags func(*flag.FlagSet), run func(context.Context, *session, []string) error) *command {
	cf := &clientFlags{}
	return &command{
		name:    name,
		summary: summary,
		usage:   usage,
		flags: func(fs *flag.FlagSet) {
			cf.register(fs)
			if flags != nil {
				flags(fs)
			}
		},
		takesArgs: true,
		exec: func(ctx context.Context, fs *flag.FlagSet, stdout io.Writer) error {
			args, err := positional(fs)
			if err != nil {
				return err
			}
			switch {
			case len(args) < nargs:
				return usagef("missing the workflow's NAME: `%s NAME [flags]` (see `%s --help`)", fs.Name(), fs.Name())
			case len(args) > nargs:
				return usagef("unexpected argument(s) %q (see `%s --help`)", args[nargs:], fs.Name())
			}
			if err := applyLayers(fs, cf.config); err != nil {
				return err
			}
			if cf.output != "text" && cf.output != "json" {
				return usagef("--output must be text or json, not %q", cf.output)
			}
			if cf.timeout <= 0 {
				return usagef("--timeout %s: must be positive", cf.timeout)
			}
			opts, err := cf.dialOptions()
			if err != nil {
				return err
			}
			conn, err := grpc.NewClient(cf.coordinator, opts...)
			if err != nil {
				return usagef("--coordinator %q: %w", cf.coordinator, err)
			}
			defer conn.Close()
			return run(ctx, &session{flags: cf, conn: conn, client: rowliftv1.NewControlClient(conn), stdout: stdout,
				stderr: fs.Output()}, args)
		},
	}
}

// positional returns the arguments that are not flags, parsing the flags found
// between and after them; the flag package alone stops at the first argument.
func positional(fs *flag.FlagSet) ([]string, error) {
	var args []string
	for rest := fs.Args(); len(rest) > 0; rest = fs.Args() {
		args = append(args, rest[0])
		if err := parse(fs, rest[1:]); err != nil {
			return nil, err
		}
	}
	return args, nil
}

// call runs a unary RPC under --timeout and turns its error into one an operator
// can read.
func call[T any](ctx context.Context, s *session, what string, rpc func(context.Context) (T, error)) (T, error) {
	ctx, cancel := context.WithTimeout(ctx, s.flags.timeout)
	defer cancel()
	out, err := rpc(ctx)
	if err != nil {
		return out, s.rpcError(what, err)
	}
	return out, nil
}

// rpcError shows a failed RPC as the server's message and the code's name, or as
// the coordinator being out of reach when no connection was ever made.
func (s *session) rpcError(what string, err error) error {
	st, ok := status.FromError(err)
	if !ok {
		return fmt.Errorf("%s: %w", what, err)
	}
	msg := st.Message()
	switch {
	case st.Code() == codes.Unavailable && s.conn.GetState() != connectivity.Ready:
		// grpc-go's transport error; the dial error inside it is what matters.
		msg = fmt.Sprintf("cannot reach the coordinator at %s: %s", s.flags.coordinator, grpctls.Explain(msg))
	case st.Code() == codes.DeadlineExceeded:
		msg = fmt.Sprintf("no answer from the coordinator at %s within --timeout %s", s.flags.coordinator, s.flags.timeout)
	}
	return &statusError{what: what, msg: msg, st: st}
}

// statusError is a failed RPC as an operator wants to read it: the server's
// message and the code's name, without grpc-go's "rpc error: code = ... desc ="
// wrapping. It keeps the status for status.FromError.
type statusError struct {
	what string
	msg  string
	st   *status.Status
}

func (e *statusError) Error() string {
	return fmt.Sprintf("%s: %s (%s)", e.what, e.msg, e.st.Code())
}

// GRPCStatus lets status.FromError and status.Code see through the wrapping.
func (e *statusError) GRPCStatus() *status.Status { return e.st }

// usageError is a command line the user must fix, as opposed to a failure of the
// work itself: main exits 2 for it, as command-line conventions do, so a script can
// tell a typo from a failed operation.
type usageError struct{ err error }

func (e usageError) Error() string { return e.err.Error() }
func (e usageError) Unwrap() error { return e.err }

func usagef(format string, args ...any) error { return usageError{fmt.Errorf(format, args...)} }

// exitCode is the process exit status for err: 2 for usage errors, 3 for
// calls the coordinator refused for their credentials (Unauthenticated,
// PermissionDenied), so a script can tell a missing token from a failed
// operation, 4 for a listing no target answered, else 1.
func exitCode(err error) int {
	var u usageError
	if errors.As(err, &u) {
		return 2
	}
	var se *statusError
	if errors.As(err, &se) && (se.st.Code() == codes.Unauthenticated || se.st.Code() == codes.PermissionDenied) {
		return 3
	}
	if errors.As(err, new(noTargetAnswered)) {
		return 4
	}
	return 1
}

// printJSON writes m as indented protojson (canonical field names, zero values
// included so a script finds every field).
func printJSON(w io.Writer, m proto.Message) error {
	b, err := protojson.MarshalOptions{Multiline: true, Indent: "  ", EmitUnpopulated: true}.Marshal(m)
	if err != nil {
		return fmt.Errorf("encode %s as JSON: %w", m.ProtoReflect().Descriptor().Name(), err)
	}
	_, err = fmt.Fprintf(w, "%s\n", b)
	return err
}

func startWorkflow(ctx context.Context, c rowliftv1.ControlClient, ref *rowliftv1.WorkflowRef) (*rowliftv1.Workflow, error) {
	return c.StartWorkflow(ctx, ref)
}

func stopWorkflow(ctx context.Context, c rowliftv1.ControlClient, ref *rowliftv1.WorkflowRef) (*rowliftv1.Workflow, error) {
	return c.StopWorkflow(ctx, ref)
}

func resumeWorkflow(ctx context.Context, c rowliftv1.ControlClient, ref *rowliftv1.WorkflowRef) (*rowliftv1.Workflow, error) {
	return c.ResumeWorkflow(ctx, ref)
}

func rewindWorkflow(ctx context.Context, c rowliftv1.ControlClient, ref *rowliftv1.WorkflowRef) (*rowliftv1.Workflow, error) {
	return c.RewindWorkflow(ctx, ref)
}

// targetsFlag is --target on the commands that name an existing workflow.
func targetsFlag(fs *flag.FlagSet, targets *stringList) {
	fs.Var(targets, "target",
		"`NAME` of a target to look for the workflow on, as configured on the coordinator; repeatable; default every target, e.g. --target main")
}

// workflowRefCommand is start, stop, resume or rewind: one RPC on a named workflow that
// answers with the workflow.
func workflowRefCommand(name, summary, done string, rpc func(context.Context, rowliftv1.ControlClient, *rowliftv1.WorkflowRef) (*rowliftv1.Workflow, error)) *command {
	var targets stringList
	return workflowLeaf(name, summary, "NAME [flags]\n\nExample:\n  rowlift workflow "+name+" orders --coordinator 10.0.0.9:7000", 1,
		func(fs *flag.FlagSet) { targetsFlag(fs, &targets) },
		func(ctx context.Context, s *session, args []string) error {
			ref := &rowliftv1.WorkflowRef{Name: args[0], Targets: targets}
			w, err := call(ctx, s, name+" workflow "+args[0], func(ctx context.Context) (*rowliftv1.Workflow, error) {
				return rpc(ctx, s.client, ref)
			})
			if err != nil {
				return err
			}
			if s.flags.output == "json" {
				return printJSON(s.stdout, w)
			}
			_, err = fmt.Fprintf(s.stdout, "%s workflow %s: %s\n", done, args[0], statustext.StateLine(w.GetStatus()))
			return err
		})
}

func workflowDeleteCommand() *command {
	var targets stringList
	return workflowLeaf("delete", "stop a workflow and remove its state from every target; copied tables and rows stay",
		"NAME [flags]\n\nExample:\n  rowlift workflow delete orders --coordinator 10.0.0.9:7000", 1,
		func(fs *flag.FlagSet) { targetsFlag(fs, &targets) },
		func(ctx context.Context, s *session, args []string) error {
			ref := &rowliftv1.WorkflowRef{Name: args[0], Targets: targets}
			resp, err := call(ctx, s, "delete workflow "+args[0], func(ctx context.Context) (*rowliftv1.DeleteWorkflowResponse, error) {
				return s.client.DeleteWorkflow(ctx, ref)
			})
			if err != nil {
				return err
			}
			if s.flags.output == "json" {
				return printJSON(s.stdout, resp)
			}
			fmt.Fprintf(s.stdout, "deleted workflow %s\n", args[0])
			if kept := resp.GetKeptTables(); len(kept) > 0 {
				fmt.Fprintf(s.stdout, "kept target tables with their rows (drop them by hand if unwanted): %s\n", strings.Join(kept, ", "))
			}
			return nil
		})
}

func workflowShowCommand() *command {
	var targets stringList
	return workflowLeaf("show", "print a workflow's definition and status once",
		"NAME [flags]\n\nExamples:\n  rowlift workflow show orders --coordinator 10.0.0.9:7000\n"+
			"  rowlift workflow show orders --output json | jq -r .status.phase", 1,
		func(fs *flag.FlagSet) { targetsFlag(fs, &targets) },
		func(ctx context.Context, s *session, args []string) error {
			ref := &rowliftv1.WorkflowRef{Name: args[0], Targets: targets}
			w, err := call(ctx, s, "show workflow "+args[0], func(ctx context.Context) (*rowliftv1.Workflow, error) {
				return s.client.GetWorkflow(ctx, ref)
			})
			if err != nil {
				return err
			}
			if s.flags.output == "json" {
				return printJSON(s.stdout, w)
			}
			_, err = io.WriteString(s.stdout, renderShow(w, time.Now()))
			return err
		})
}

func workflowListCommand() *command {
	var targets stringList
	return workflowLeaf("list", "list the workflows on the coordinator's targets with their phase and progress",
		"[flags]\n\nA target that cannot be read gets a line on stderr, with the workflows it hides; the others are listed.\n"+
			"Exit status: 0 when at least one target answered, 3 when none did, 1 when the coordinator could not be asked.\n\n"+
			"Example:\n  rowlift workflow list --coordinator 10.0.0.9:7000 --target main", 0,
		func(fs *flag.FlagSet) {
			fs.Var(&targets, "target", "`NAME` of a target to list, as configured on the coordinator; repeatable; default every target, e.g. --target main")
		},
		func(ctx context.Context, s *session, _ []string) error {
			resp, err := call(ctx, s, "list workflows", func(ctx context.Context) (*rowliftv1.ListWorkflowsResponse, error) {
				return s.client.ListWorkflows(ctx, &rowliftv1.ListWorkflowsRequest{Targets: targets})
			})
			if err != nil {
				return err
			}
			if s.flags.output == "json" {
				err = printJSON(s.stdout, resp)
			} else if len(resp.GetTargetsRead()) > 0 {
				_, err = io.WriteString(s.stdout, renderList(resp.GetWorkflows()))
			}
			if err != nil {
				return err
			}
			for _, te := range resp.GetTargetErrors() {
				fmt.Fprintf(s.stderr, "rowlift: %s\n", renderTargetError(te))
			}
			if len(resp.GetTargetsRead()) == 0 && len(resp.GetTargetErrors()) > 0 {
				return noTargetAnswered{len(resp.GetTargetErrors())}
			}
			return nil
		})
}

// noTargetAnswered is a listing where no target could be read: main exits 4
// for it, so a script tells it from a failed call (1) and from a listing with
// some targets down (0, with a line per target down on stderr).
type noTargetAnswered struct{ targets int }

func (e noTargetAnswered) Error() string {
	return fmt.Sprintf("list workflows: none of the %d targets could be read (see above)", e.targets)
}
