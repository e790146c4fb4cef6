package sandbox

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

// fakeServer writes an executable that prints a version line like a server's.
func fakeServer(t *testing.T, dir, name, version string) string {
	p := filepath.Join(dir, name)
	require.NoError(t, os.WriteFile(p, []byte("#!/bin/sh\necho '"+version+"'\n"), 0o755))
	return p
}

func TestFindBinaryNoneInstalledSaysMakeSetup(t *testing.T) {
	_, _, err := findProgramIn(MariaDB, []string{t.TempDir()}, "")
	require.ErrorIs(t, err, ErrNoServer)
	require.Contains(t, err.Error(), "run `make setup`")
}

func TestFindBinaryMySQLSkipsMariaDBNamedMysqld(t *testing.T) {
	dir := t.TempDir()
	fakeServer(t, dir, "mysqld", "mysqld  Ver 10.11.19-MariaDB for debian-linux-gnu")
	_, _, err := findProgramIn(MySQL, []string{dir}, "")
	require.ErrorIs(t, err, ErrNoServer, "a MariaDB binary named mysqld is not MySQL")

	mysqlDir := t.TempDir()
	want := fakeServer(t, mysqlDir, "mysqld", "mysqld  Ver 8.0.40 for Linux on x86_64 (MySQL Community Server - GPL)")
	got, version, err := findProgramIn(MySQL, []string{dir, mysqlDir}, "")
	require.NoError(t, err)
	require.Equal(t, want, got.path)
	require.Contains(t, version, "8.0.40")
}

// TestFindBinaryMySQLIgnoresUnfinishedRoot: a MySQL root without the marker that
// tools/mysql-root.sh writes last is an interrupted build, not a server.
func TestFindBinaryMySQLIgnoresUnfinishedRoot(t *testing.T) {
	root := t.TempDir()
	require.NoError(t, os.MkdirAll(filepath.Join(root, "usr", "sbin"), 0o755))
	fakeServer(t, filepath.Join(root, "usr", "sbin"), "mysqld", "mysqld  Ver 9.7.4-2 for Linux on x86_64 ((Debian))")
	_, _, err := findProgramIn(MySQL, nil, root)
	require.ErrorIs(t, err, ErrNoServer)
	require.ErrorContains(t, err, "the MySQL root "+root)
	require.ErrorContains(t, err, "run `make setup`")
}

func TestFindBinaryMariaDBPrefersMariadbd(t *testing.T) {
	dir := t.TempDir()
	fakeServer(t, dir, "mysqld", "mysqld  Ver 10.11.19-MariaDB")
	want := fakeServer(t, dir, "mariadbd", "mariadbd  Ver 10.11.19-MariaDB")
	got, _, err := findProgramIn(MariaDB, []string{dir}, "")
	require.NoError(t, err)
	require.Equal(t, want, got.path)
}

func TestUnknownFlavor(t *testing.T) {
	_, err := resolveFlavor("postgres")
	require.ErrorContains(t, err, `unknown sandbox flavor "postgres"`)
	t.Setenv(FlavorEnv, "mysql")
	f, err := resolveFlavor("")
	require.NoError(t, err)
	require.Equal(t, MySQL, f)
}
