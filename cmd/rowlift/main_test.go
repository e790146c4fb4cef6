package main

import (
	"bytes"
	"context"
	"flag"
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
	require.Regexp(t, `^rowlift \S+ \(go1\.\d+`, out)
}

func TestLeafHelpListsFlags(t *testing.T) {
	out, err := runCLI(t, "dev", "mysqld", "--help")
	require.ErrorIs(t, err, flag.ErrHelp)
	require.Contains(t, out, "-flavor")
	require.Contains(t, out, "-arg")
}

func TestDemoRefusesUnknownFlavor(t *testing.T) {
	_, err := runCLI(t, "demo", "--flavor", "postgres")
	require.ErrorContains(t, err, "--flavor postgres: want mariadb or mysql")
}
