package main

import (
	"bytes"
	"context"
	"flag"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func runCLI(t *testing.T, args ...string) (string, error) {
	t.Helper()
	var out bytes.Buffer
	err := root().run(context.Background(), args, &out, &out)
	return out.String(), err
}

func TestHelpListsCommands(t *testing.T) {
	out, err := runCLI(t, "--help")
	require.ErrorIs(t, err, flag.ErrHelp, "--help exits 0")
	require.Contains(t, out, "Usage: rowlift <command>")
	require.Contains(t, out, "version")
	require.Contains(t, out, "dev")
}

func TestNoArgsShowsHelpAndFails(t *testing.T) {
	out, err := runCLI(t)
	require.ErrorContains(t, err, "missing subcommand")
	require.Contains(t, out, "Commands:")
}

func TestUnknownSubcommand(t *testing.T) {
	_, err := runCLI(t, "dev", "postgres")
	require.EqualError(t, err, "unknown subcommand \"postgres\" (see `rowlift dev --help`)")
}

func TestVersion(t *testing.T) {
	out, err := runCLI(t, "version")
	require.NoError(t, err)
	require.Regexp(t, `^rowlift \S+ \((revision unknown|[0-9a-f]{7,}(-dirty)?), go1\.\d+`, out)
}

func TestLeafHelpListsFlags(t *testing.T) {
	out, err := runCLI(t, "dev", "mysqld", "--help")
	require.ErrorIs(t, err, flag.ErrHelp)
	require.Contains(t, out, "-flavor FLAVOR")
	require.Contains(t, out, "-arg OPTION")
}

func TestDemoRefusesUnknownFlavor(t *testing.T) {
	for _, args := range [][]string{{"demo", "--flavor", "postgres"}, {"dev", "mysqld", "--flavor", "postgres"}} {
		_, err := runCLI(t, args...)
		require.EqualError(t, err, "--flavor postgres: want mariadb or mysql", args[0])
		require.Equal(t, 2, exitCode(err), args[0])
	}
}

// eachLeaf calls fn with every leaf command of the tree and its arguments
// (["workflow", "show"]).
func eachLeaf(c *command, args []string, fn func(args []string, leaf *command)) {
	if c.exec != nil {
		fn(args, c)
		return
	}
	for _, sub := range c.subs {
		eachLeaf(sub, append(args[:len(args):len(args)], sub.name), fn)
	}
}

// valueName is how a flag's help may name its value: a placeholder in
// capitals (`NAME=ADDR`, `NAME[:COL,COL...]`), the flag package's name of its
// type when the usage has none, or nothing for a bool.
var valueName = regexp.MustCompile(`^([A-Z][A-Z0-9_=:\[\]|,.]*|string|int|int64|uint|uint64|float|duration|value|)$`)

// TestFlagValueNames: the flag package takes the first back-quoted words of a
// usage text for the name of the flag's value, so a usage that quotes a
// command in back quotes before any placeholder reads wrong in the help
// ("-flavor make setup" did). Every flag of every command names its value as
// a placeholder.
func TestFlagValueNames(t *testing.T) {
	n := 0
	eachLeaf(root(), nil, func(args []string, c *command) {
		if c.flags == nil {
			return
		}
		fs := newTestFlagSet()
		c.flags(fs)
		fs.VisitAll(func(f *flag.Flag) {
			name, _ := flag.UnquoteUsage(f)
			require.Regexp(t, valueName, name, "rowlift %s --%s: value name %q", strings.Join(args, " "), f.Name, name)
			n++
		})
	})
	require.Greater(t, n, 50, "every command's flags were walked")
}

// TestFlagErrorsAreOneLine: on every command, a flag that is not defined or
// does not parse is one line on stderr saying where the help is, with exit
// status 2 (the whole help before it hid it); --help still prints the help
// and exits 0.
func TestFlagErrorsAreOneLine(t *testing.T) {
	isolate(t)
	eachLeaf(root(), nil, func(args []string, _ *command) {
		path := "rowlift " + strings.Join(args, " ")
		out, err := runCLI(t, append(args, "--bogus")...)
		require.Empty(t, out, path)
		var stderr bytes.Buffer
		require.Equal(t, 2, report(err, &stderr), path)
		require.Equal(t, "rowlift: flag provided but not defined: -bogus (see `"+path+" --help`)\n", stderr.String())

		out, err = runCLI(t, append(args, "--help")...)
		require.Equal(t, 0, report(err, io.Discard), path)
		require.Contains(t, out, "Usage: "+path, path)
	})
	for _, tc := range []struct{ args, want string }{
		{"applier --poll-interval soon", `invalid value "soon" for flag -poll-interval: parse error (see ` + "`rowlift applier --help`)"},
		{"streamer --listen", "flag needs an argument: -listen (see `rowlift streamer --help`)"},
		{"workflow show w --bogus", "flag provided but not defined: -bogus (see `rowlift workflow show --help`)"},
	} {
		out, err := runCLI(t, strings.Fields(tc.args)...)
		require.Empty(t, out, tc.args)
		require.EqualError(t, err, tc.want, tc.args)
		require.Equal(t, 2, exitCode(err), tc.args)
	}
}

// TestUsageErrorsExitTwo: a role without its server, an argument no command
// takes and a bad value in the environment are usage errors, exit status 2,
// like every other mistake on the command line.
func TestUsageErrorsExitTwo(t *testing.T) {
	for _, env := range []string{"SOURCE_DSN", "SOURCE_DSN_FILE", "TARGET_DSN", "TARGET_DSN_FILE", "TARGET", "TARGET_FILE"} {
		t.Setenv("ROWLIFT_"+env, "")
		require.NoError(t, os.Unsetenv("ROWLIFT_"+env))
	}
	for _, tc := range []struct{ args, want string }{
		{"streamer", "--source-dsn or --source-dsn-file (or $ROWLIFT_SOURCE_DSN, $ROWLIFT_SOURCE_DSN_FILE) is required " +
			"(see `rowlift streamer --help`)"},
		{"applier", "--target-dsn or --target-dsn-file (or $ROWLIFT_TARGET_DSN, $ROWLIFT_TARGET_DSN_FILE) is required " +
			"(see `rowlift applier --help`)"},
		{"coordinator", "--target NAME=DSN or --target-file NAME=FILE (or $ROWLIFT_TARGET, $ROWLIFT_TARGET_FILE) is required, " +
			"once per target server (see `rowlift coordinator --help`)"},
		{"streamer --source-dsn-file /nonexistent/dsn", "--source-dsn-file: open /nonexistent/dsn: no such file or directory"},
		{"demo mysql", "unexpected argument(s) [\"mysql\"] (see `rowlift demo --help`)"},
		{"version now", "unexpected argument(s) [\"now\"] (see `rowlift version --help`)"},
	} {
		out, err := runCLI(t, strings.Fields(tc.args)...)
		require.Empty(t, out, tc.args)
		require.EqualError(t, err, tc.want, tc.args)
		require.Equal(t, 2, exitCode(err), tc.args)
	}
	t.Setenv("ROWLIFT_POLL_INTERVAL", "soon")
	_, err := runCLI(t, "applier", "--target-dsn", "u@tcp(h:3306)/")
	require.EqualError(t, err, "$ROWLIFT_POLL_INTERVAL: invalid value for --poll-interval: parse error")
	require.Equal(t, 2, exitCode(err))
}

// TestCommandLineWinsOverEnvironment: a flag given on the command line takes
// nothing from $ROWLIFT_<FLAG>, also a flag that may be repeated, whose values
// would add up; a flag not given takes the environment's.
func TestCommandLineWinsOverEnvironment(t *testing.T) {
	t.Setenv("ROWLIFT_TARGET", "a=root@tcp(h1:3306)/")
	t.Setenv("ROWLIFT_LISTEN", "0.0.0.0:7000")
	parse := func(args ...string) (stringList, string) {
		fs := flag.NewFlagSet("test", flag.ContinueOnError)
		var targets stringList
		fs.Var(&targets, "target", "")
		listen := fs.String("listen", "", "")
		require.NoError(t, parseFlags(fs, args))
		return targets, *listen
	}
	targets, listen := parse("--target", "b=root@tcp(h2:3306)/", "--target", "c=root@tcp(h3:3306)/")
	require.Equal(t, stringList{"b=root@tcp(h2:3306)/", "c=root@tcp(h3:3306)/"}, targets, "the command line's targets only")
	require.Equal(t, "0.0.0.0:7000", listen, "a flag not given comes from the environment")
	targets, listen = parse("--listen", "127.0.0.1:1")
	require.Equal(t, stringList{"a=root@tcp(h1:3306)/"}, targets)
	require.Equal(t, "127.0.0.1:1", listen)
}

// TestBadLogFlagsAreUsageErrors: every role and the demo refuse a bad
// --log-level or --log-format (or $ROWLIFT_LOG_LEVEL) before starting
// anything, with exit status 2.
func TestBadLogFlagsAreUsageErrors(t *testing.T) {
	for _, args := range [][]string{
		{"streamer", "--source-dsn", "u@tcp(h:3306)/"},
		{"applier", "--target-dsn", "u@tcp(h:3306)/"},
		{"coordinator", "--target", "main=u@tcp(h:3306)/"},
		{"demo"},
	} {
		_, err := runCLI(t, append(args, "--log-level", "verbose")...)
		require.EqualError(t, err, `log level "verbose": want one of debug, info, warn, error`, args[0])
		require.Equal(t, 2, exitCode(err), args[0])
		_, err = runCLI(t, append(args, "--log-format", "text")...)
		require.EqualError(t, err, `log format "text": want one of json, console`, args[0])
		require.Equal(t, 2, exitCode(err), args[0])
	}
	t.Setenv("ROWLIFT_LOG_LEVEL", "loud")
	_, err := runCLI(t, "applier", "--target-dsn", "u@tcp(h:3306)/")
	require.EqualError(t, err, `log level "loud": want one of debug, info, warn, error`)
	require.Equal(t, 2, exitCode(err))
}

// TestDevMysqldSaysWhatItDoes: before its start, which is a minute or two of
// silence on a first run, `rowlift dev mysqld` says what it does on stderr,
// and leaves stdout to the server's details (here none: the start fails at
// once, under a --root that cannot be made).
func TestDevMysqldSaysWhatItDoes(t *testing.T) {
	file := filepath.Join(t.TempDir(), "file")
	require.NoError(t, os.WriteFile(file, nil, 0o600))
	var stdout, stderr bytes.Buffer
	err := root().run(context.Background(), []string{"dev", "mysqld", "--flavor", "mariadb", "--root", filepath.Join(file, "dir")}, &stdout, &stderr)
	require.Error(t, err)
	require.Empty(t, stdout.String())
	require.Equal(t, devMysqldStarting+"\n", stderr.String())
}
