package authz

import (
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

func TestNewBearer(t *testing.T) {
	b, err := NewBearer("  s3cret-0123456789")
	require.NoError(t, err)
	md, err := b.GetRequestMetadata(t.Context())
	require.NoError(t, err)
	require.Equal(t, map[string]string{"authorization": "Bearer s3cret-0123456789"}, md)

	_, err = NewBearer(" ")
	require.EqualError(t, err, "the token is empty")
	_, err = NewBearer("admin s3cret-0123456789")
	require.EqualError(t, err, "the file must hold the token alone, on one line "+
		`(a coordinator's --auth-token-file, with its "ROLE TOKEN" lines, is not one)`)
	require.NotContains(t, err.Error(), "s3cret", "errors never show a token")
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
