// Command rowlift moves MySQL/MariaDB tables between hosts and keeps them in sync.
// One binary carries every role as a subcommand; run `rowlift --help` for the list.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := report(root().run(ctx, os.Args[1:], os.Stdout, os.Stderr), os.Stderr)
	stop()
	os.Exit(code)
}

// report prints the error a command ended with on stderr, as one line, and
// returns the exit status: 0 also for --help, 2 for a usage error (exitCode).
func report(err error, stderr io.Writer) int {
	if err == nil || errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if !errors.As(err, new(loggedError)) {
		fmt.Fprintf(stderr, "rowlift: %v\n", err)
	}
	return exitCode(err)
}

// root is the command tree. Each role (streamer, applier, coordinator, workflow)
// is a subcommand of its own.
func root() *command {
	return &command{
		name:    "rowlift",
		summary: "move MySQL/MariaDB tables between hosts and keep them in sync",
		subs: []*command{
			streamerCommand(),
			applierCommand(),
			coordinatorCommand(),
			workflowCommand(),
			demoCommand(),
			versionCommand(),
			{
				name:    "dev",
				summary: "tools for development: throwaway servers",
				subs:    []*command{devMysqldCommand()},
			},
		},
	}
}

// command is one node of the subcommand tree: either a group of subcommands or a
// leaf with flags and a run function.
type command struct {
	name    string
	summary string
	// usage is the argument synopsis after the command path, for leaves.
	usage string
	// flags defines the leaf's flags on fs; nil for groups or flagless leaves.
	flags func(fs *flag.FlagSet)
	// exec runs the leaf after its flags are parsed.
	exec func(ctx context.Context, fs *flag.FlagSet, stdout io.Writer) error
	// takesArgs: exec reads positional arguments (fs.Args()); a leaf without
	// it refuses them, instead of ignoring what the user meant to say.
	takesArgs bool
	subs      []*command
}

func (c *command) run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	return c.runPath(ctx, c.name, args, stdout, stderr)
}

func (c *command) runPath(ctx context.Context, path string, args []string, stdout, stderr io.Writer) error {
	if c.exec == nil {
		if len(args) == 0 || args[0] == "help" || args[0] == "-h" || args[0] == "--help" || args[0] == "-help" {
			c.printGroupHelp(path, stdout)
			if len(args) == 0 {
				return usagef("missing subcommand (see `%s --help`)", path)
			}
			return flag.ErrHelp
		}
		for _, sub := range c.subs {
			if sub.name == args[0] {
				return sub.runPath(ctx, path+" "+sub.name, args[1:], stdout, stderr)
			}
		}
		return usagef("unknown subcommand %q (see `%s --help`)", args[0], path)
	}
	fs := flag.NewFlagSet(path, flag.ContinueOnError)
	fs.SetOutput(stderr)
	if c.flags != nil {
		c.flags(fs)
	}
	fs.Usage = func() {
		fmt.Fprintf(stderr, "%s: %s\n\nUsage: %s %s\n", path, c.summary, path, c.usage)
		if c.flags != nil {
			fmt.Fprintln(stderr, "\nFlags (each also read from $ROWLIFT_<FLAG_NAME>, e.g. --source-dsn from $ROWLIFT_SOURCE_DSN):")
			fs.PrintDefaults()
		}
	}
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if !c.takesArgs && fs.NArg() > 0 {
		return usagef("unexpected argument(s) %q (see `%s --help`)", fs.Args(), path)
	}
	return c.exec(ctx, fs, stdout)
}

func (c *command) printGroupHelp(path string, w io.Writer) {
	fmt.Fprintf(w, "%s: %s\n\nUsage: %s <command> [flags]\n\nCommands:\n", path, c.summary, path)
	for _, sub := range c.subs {
		fmt.Fprintf(w, "  %-12s %s\n", sub.name, sub.summary)
	}
	fmt.Fprintf(w, "\nRun `%s <command> --help` for a command's flags.\n", path)
}

// parseFlags parses the command line, then gives every flag it did not set the
// value of $ROWLIFT_<NAME> (dashes as underscores) when that is set: the
// command line wins, also for a flag that may be repeated (--target), whose
// values would otherwise add up with the environment's.
func parseFlags(fs *flag.FlagSet, args []string) error {
	if err := parse(fs, args); err != nil {
		return err
	}
	given := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { given[f.Name] = true })
	var err error
	fs.VisitAll(func(f *flag.Flag) {
		name := envName(f.Name)
		if v, ok := os.LookupEnv(name); ok && !given[f.Name] && err == nil {
			if serr := fs.Set(f.Name, v); serr != nil {
				err = usagef("$%s: invalid value for --%s: %w", name, f.Name, serr)
			}
		}
	})
	return err
}

// parse parses args into fs, a usage error when they do not parse. The flag
// package would print its error and then the whole help (fs.Usage), ahead of
// the line that matters; a mistyped flag gets one line instead, which says
// where the help is, and only -h or --help prints the help.
func parse(fs *flag.FlagSet, args []string) error {
	usage, out := fs.Usage, fs.Output()
	fs.Usage = func() {}
	fs.SetOutput(io.Discard)
	err := fs.Parse(args)
	fs.Usage = usage
	fs.SetOutput(out)
	switch {
	case errors.Is(err, flag.ErrHelp):
		usage()
		return usageError{err}
	case err != nil:
		return usagef("%v (see `%s --help`)", err, fs.Name())
	}
	return nil
}

func envName(flagName string) string {
	return "ROWLIFT_" + strings.ToUpper(strings.ReplaceAll(flagName, "-", "_"))
}
