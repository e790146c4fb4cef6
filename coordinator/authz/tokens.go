package authz

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"strings"
)

// MinTokenLen is the shortest token the token file may hold: a token is a
// password to a service that can freeze production writes.
const MinTokenLen = 16

// TokenFileHelp documents the token file's format, for the flag's help.
const TokenFileHelp = "one token per line as \"ROLE TOKEN\", ROLE admin (every call) or read (show, list, watch); " +
	"'#' starts a comment line; tokens are at least 16 characters, e.g. from `openssl rand -hex 32`"

// ParseTokens reads a token file (see TokenFileHelp). Its errors name the
// line, never the token.
func ParseTokens(b []byte) ([]Token, error) {
	var out []Token
	seen := map[string]int{}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		fields := strings.Fields(line)
		if len(fields) != 2 {
			return nil, fmt.Errorf("line %d: want \"admin TOKEN\" or \"read TOKEN\" (%d words found)", n, len(fields))
		}
		var role Role
		switch fields[0] {
		case "admin":
			role = Admin
		case "read":
			role = Read
		default:
			return nil, fmt.Errorf("line %d: role %q: want admin or read", n, fields[0])
		}
		secret := fields[1]
		if len(secret) < MinTokenLen {
			return nil, fmt.Errorf("line %d: the token is %d characters, fewer than %d: make one with `openssl rand -hex 32`", n, len(secret), MinTokenLen)
		}
		if first, dup := seen[secret]; dup {
			return nil, fmt.Errorf("line %d: the token of line %d again: give each token once", n, first)
		}
		seen[secret] = n
		out = append(out, Token{Role: role, Secret: []byte(secret)})
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("no token in it: %s", TokenFileHelp)
	}
	return out, nil
}

// readTokens reads and parses the token file at path.
func readTokens(path string) ([]Token, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("--auth-token-file: %w", err)
	}
	tokens, err := ParseTokens(b)
	if err != nil {
		return nil, fmt.Errorf("--auth-token-file %s: %w", path, err)
	}
	return tokens, nil
}
