package authz

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestParseTokens(t *testing.T) {
	long := strings.Repeat("x", MinTokenLen)
	tokens, err := ParseTokens([]byte("# rowlift tokens\n\nadmin " + long + "a\n  read\t" + long + "r  \n# read old\n"))
	require.NoError(t, err)
	require.Equal(t, []Token{{Admin, []byte(long + "a")}, {Read, []byte(long + "r")}}, tokens)

	for _, tc := range []struct{ file, want string }{
		{"", "no token in it: one token per line"},
		{"# only a comment\n", "no token in it"},
		{"admin\n", `line 1: want "admin TOKEN" or "read TOKEN" (1 words found)`},
		{"read " + long + " extra\n", `line 1: want "admin TOKEN" or "read TOKEN" (3 words found)`},
		{"\nwrite " + long + "\n", `line 2: role "write": want admin or read`},
		{"admin short\n", "line 1: the token is 5 characters, fewer than 16: make one with `openssl rand -hex 32`"},
		{"admin " + long + "\nread " + long + "\n", "line 2: the token of line 1 again: give each token once"},
	} {
		_, err := ParseTokens([]byte(tc.file))
		require.ErrorContains(t, err, tc.want, "%q", tc.file)
		if len(tc.file) > 5 {
			require.NotContains(t, err.Error(), long, "errors never show a token")
		}
	}
}

func TestReadBearer(t *testing.T) {
	dir := t.TempDir()
	write := func(name, body string) string {
		p := filepath.Join(dir, name)
		require.NoError(t, os.WriteFile(p, []byte(body), 0o600))
		return p
	}
	b, err := ReadBearer(write("ok", "  s3cret-0123456789\n"))
	require.NoError(t, err)
	md, err := b.GetRequestMetadata(t.Context())
	require.NoError(t, err)
	require.Equal(t, map[string]string{"authorization": "Bearer s3cret-0123456789"}, md)

	empty := write("empty", "\n")
	_, err = ReadBearer(empty)
	require.EqualError(t, err, "--token-file "+empty+" is empty: put the token in it, alone")
	server := write("server", "admin s3cret-0123456789\n")
	_, err = ReadBearer(server)
	require.EqualError(t, err, "--token-file "+server+": the file must hold the token alone, on one line "+
		`(a coordinator's --auth-token-file, with its "ROLE TOKEN" lines, is not one)`)
	_, err = ReadBearer(filepath.Join(dir, "missing"))
	require.ErrorContains(t, err, "--token-file: open "+filepath.Join(dir, "missing")+": no such file or directory")
}

func TestLoopback(t *testing.T) {
	for addr, want := range map[string]bool{
		"127.0.0.1:7000": true, "127.3.2.1:7000": true, "[::1]:7000": true, "localhost:7000": true, "localhost": true,
		":7000": false, "0.0.0.0:7000": false, "[::]:7000": false, "10.0.0.9:7000": false, "coordinator:7000": false,
		"coordinator.prod.svc:7000": false, "dns:///coordinator:7000": false,
	} {
		require.Equal(t, want, Loopback(addr), addr)
		if want {
			require.NoError(t, CheckPlaintext(addr, false), addr)
		} else {
			require.ErrorIs(t, CheckPlaintext(addr, false), errPlaintextToken, addr)
		}
		require.NoError(t, CheckPlaintext(addr, true), addr)
	}
}
