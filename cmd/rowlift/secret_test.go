package main

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

// secretFile writes content to a file of the test's and returns its path.
func secretFile(t *testing.T, content string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "secret")
	require.NoError(t, os.WriteFile(path, []byte(content), 0o600))
	return path
}

func TestReadSecretFile(t *testing.T) {
	for content, want := range map[string]string{
		"s3cret":           "s3cret",
		"s3cret\n":         "s3cret",
		"s3cret\r\n":       "s3cret",
		"s3cret\n\n":       "s3cret",
		" pass word \n":    " pass word ",
		"u:p@tcp(h:1)/\n":  "u:p@tcp(h:1)/",
		"line1\nline2\n":   "line1\nline2",
		"trailing space ":  "trailing space ",
		"\ttab-led secret": "\ttab-led secret",
	} {
		got, err := readSecretFile("token-file", secretFile(t, content))
		require.NoError(t, err, "%q", content)
		require.Equal(t, want, got, "%q", content)
	}
	for _, content := range []string{"", "\n", "\r\n\n"} {
		path := secretFile(t, content)
		_, err := readSecretFile("token-file", path)
		require.EqualError(t, err, "--token-file: "+path+" is empty: it must hold the secret itself", "%q", content)
	}
	_, err := readSecretFile("token-file", "/nonexistent/token")
	require.EqualError(t, err, "--token-file: open /nonexistent/token: no such file or directory")
}

func TestValueOrFile(t *testing.T) {
	path := secretFile(t, "from-file\n")
	got, err := valueOrFile("source-dsn", "", "source-dsn-file", path)
	require.NoError(t, err)
	require.Equal(t, "from-file", got)
	got, err = valueOrFile("source-dsn", "inline", "source-dsn-file", "")
	require.NoError(t, err)
	require.Equal(t, "inline", got)
	got, err = valueOrFile("source-dsn", "", "source-dsn-file", "")
	require.NoError(t, err)
	require.Empty(t, got, "neither: the caller decides")

	_, err = valueOrFile("source-dsn", "inline-s3cret", "source-dsn-file", path)
	require.EqualError(t, err, "--source-dsn and --source-dsn-file are both given (on the command line or as $ROWLIFT_SOURCE_DSN and "+
		"$ROWLIFT_SOURCE_DSN_FILE): give one")
	require.Equal(t, 2, exitCode(err), "a usage error")
}

// TestDSNFileFlags: each role's DSN flags refuse what they cannot use, and
// never print the DSN or the file's content.
func TestDSNFileFlags(t *testing.T) {
	const password = "pw@:,s3cret"
	dsnFile := secretFile(t, "u:"+password+"@tcp(127.0.0.1:1)/\n")
	empty := secretFile(t, "\n")
	badDSN := secretFile(t, "u:"+password+"@tcp(127.0.0.1:1)")
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"streamer", "--source-dsn", "u:" + password + "@tcp(h:1)/", "--source-dsn-file", dsnFile}, "--source-dsn and --source-dsn-file are both given"},
		{[]string{"streamer", "--source-dsn-file", empty}, "--source-dsn-file: " + empty + " is empty"},
		{[]string{"streamer", "--source-dsn-file", "/nonexistent/dsn"}, "--source-dsn-file: open /nonexistent/dsn: no such file or directory"},
		{[]string{"streamer", "--source-dsn-file", badDSN}, "source: parse DSN (want user:password@tcp(host:port)/db): invalid DSN: missing the slash"},
		{[]string{"streamer"}, "--source-dsn or --source-dsn-file (or $ROWLIFT_SOURCE_DSN, $ROWLIFT_SOURCE_DSN_FILE) is required"},
		{[]string{"applier", "--target-dsn", "u:" + password + "@tcp(h:1)/", "--target-dsn-file", dsnFile}, "--target-dsn and --target-dsn-file are both given"},
		{[]string{"applier", "--target-dsn-file", empty}, "--target-dsn-file: " + empty + " is empty"},
		{[]string{"applier", "--target-dsn-file", badDSN}, "target: parse DSN (want user:password@tcp(host:port)/db): invalid DSN: missing the slash"},
		{[]string{"applier"}, "--target-dsn or --target-dsn-file (or $ROWLIFT_TARGET_DSN, $ROWLIFT_TARGET_DSN_FILE) is required"},
		{[]string{"coordinator", "--target-file", "main"}, `target file "main": want NAME=FILE`},
		{[]string{"coordinator", "--target-file", "main=" + empty}, "target main: --target-file: " + empty + " is empty"},
		{[]string{"coordinator", "--target-file", "main=" + badDSN}, "target main: parse DSN (want user:password@tcp(host:port)/db): invalid DSN: missing the slash"},
		{[]string{"coordinator", "--target", "main=u:" + password + "@tcp(h:1)/", "--target-file", "main=" + dsnFile}, `target "main" is given twice`},
		{[]string{"coordinator"}, "--target NAME=DSN or --target-file NAME=FILE (or $ROWLIFT_TARGET, $ROWLIFT_TARGET_FILE) is required"},
	} {
		out, err := runCLI(t, c.args...)
		require.ErrorContains(t, err, c.want, "%q", c.args)
		require.NotContains(t, err.Error()+out, password, "%q", c.args)
	}
}

// TestDSNFromEnvironmentAndFile: a DSN in the environment and a DSN file on
// the command line are two answers to one question, refused like two flags.
func TestDSNFromEnvironmentAndFile(t *testing.T) {
	t.Setenv("ROWLIFT_TARGET_DSN", "u:env-s3cret@tcp(h:1)/")
	out, err := runCLI(t, "applier", "--target-dsn-file", secretFile(t, "u:file-s3cret@tcp(h:1)/"))
	require.ErrorContains(t, err, "--target-dsn and --target-dsn-file are both given (on the command line or as $ROWLIFT_TARGET_DSN and $ROWLIFT_TARGET_DSN_FILE): give one")
	require.NotContains(t, err.Error()+out, "s3cret")
}

func TestTargetFileFlag(t *testing.T) {
	a := secretFile(t, "u:p@ss,w:rd@tcp(h1:3306)/\n")
	b := secretFile(t, "root@tcp(h2:3306)/?tls=true")
	f := targetFlag{}
	require.NoError(t, f.add("x=root@tcp(h3:3306)/"))
	require.NoError(t, f.addFiles("a="+a+",b="+b), "the $ROWLIFT_TARGET_FILE form: a comma list")
	require.Equal(t, targetFlag{"a": "u:p@ss,w:rd@tcp(h1:3306)/", "b": "root@tcp(h2:3306)/?tls=true", "x": "root@tcp(h3:3306)/"}, f)

	t.Setenv("ROWLIFT_TARGET_FILE", "a=/nonexistent/dsn")
	_, err := runCLI(t, "coordinator")
	require.EqualError(t, err, "$ROWLIFT_TARGET_FILE: target a: --target-file: open /nonexistent/dsn: no such file or directory")
}
