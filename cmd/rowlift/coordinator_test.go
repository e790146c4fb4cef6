package main

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestTargetFlag(t *testing.T) {
	f := targetFlag{}
	require.NoError(t, f.add("a=root@tcp(h1:3306)/"))
	// The $ROWLIFT_TARGET form: a comma list, where a comma inside a DSN (here
	// in a password) stays with its DSN.
	require.NoError(t, f.add("b=u:pa,ss@tcp(h2:3306)/,c=root@tcp(h3:3306)/?timeout=5s"))
	require.Equal(t, targetFlag{"a": "root@tcp(h1:3306)/", "b": "u:pa,ss@tcp(h2:3306)/", "c": "root@tcp(h3:3306)/?timeout=5s"}, f)
	require.Equal(t, []string{"a", "b", "c"}, f.names())

	require.ErrorContains(t, f.add("a=root@tcp(h9:3306)/"), `target "a" is given twice`)
	err := targetFlag{}.add("root:s3cret@tcp(h1:3306)/")
	require.ErrorContains(t, err, "want NAME=DSN")
	require.NotContains(t, err.Error(), "s3cret", "a malformed item's password is not echoed")
	require.ErrorContains(t, targetFlag{}.add("a=user@h1"), "target a: parse DSN")
	require.EqualError(t, targetFlag{}.add("shard.1=root@tcp(h1:3306)/"),
		`target name "shard.1": use 1 to 64 letters, digits, '_' or '-', e.g. main or shard-80`)
	// A part whose text before '=' is no valid name continues the DSN before it.
	g := targetFlag{}
	require.NoError(t, g.add("a=u:p,x y=z@tcp(h1:3306)/"))
	require.Equal(t, targetFlag{"a": "u:p,x y=z@tcp(h1:3306)/"}, g)
}

func TestCoordinatorNeedsTargets(t *testing.T) {
	t.Setenv("ROWLIFT_TARGET", "")
	_, err := runCLI(t, "coordinator", "--listen", "127.0.0.1:0")
	require.ErrorContains(t, err, "want NAME=DSN", "an empty $ROWLIFT_TARGET is refused")
}

func TestCoordinatorTargetsFromEnv(t *testing.T) {
	t.Setenv("ROWLIFT_TARGET", "a=root@tcp(h1:3306)/,b=")
	_, err := runCLI(t, "coordinator")
	require.ErrorContains(t, err, `$ROWLIFT_TARGET: target "b=": want NAME=DSN`)
}

// TestBadTargetFlagHidesPassword: a malformed --target is refused without its
// password on the screen (the flag package would echo the whole value).
func TestBadTargetFlagHidesPassword(t *testing.T) {
	out, err := runCLI(t, "coordinator", "--target", "main=u:s3cret@tcp(host:3306")
	require.ErrorContains(t, err, "target main: parse DSN")
	require.NotContains(t, err.Error()+out, "s3cret")
}
