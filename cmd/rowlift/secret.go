package main

import (
	"fmt"
	"os"
	"strings"
)

// readSecretFile reads a secret (a DSN, a token) from the file a --*-file flag
// names, as a mounted Kubernetes Secret provides it: trailing line breaks are
// dropped, an empty file is an error, and errors name the flag and the file,
// never what the file holds. The file is read once; a restart picks up a
// rotated secret.
func readSecretFile(flagName, path string) (string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return "", fmt.Errorf("--%s: %w", flagName, err)
	}
	secret := strings.TrimRight(string(b), "\r\n")
	if secret == "" {
		return "", fmt.Errorf("--%s: %s is empty: it must hold the secret itself", flagName, path)
	}
	return secret, nil
}

// valueOrFile returns a secret given either inline (--valueFlag) or in a file
// (--fileFlag): both at once is a usage error, since one would silently win,
// and so is a file that cannot be read, as for the coordinator's --target-file.
// It returns "" when neither is given; the caller says whether that is allowed.
func valueOrFile(valueFlag, value, fileFlag, path string) (string, error) {
	switch {
	case value != "" && path != "":
		return "", usagef("--%s and --%s are both given (on the command line or as $%s and $%s): give one",
			valueFlag, fileFlag, envName(valueFlag), envName(fileFlag))
	case path != "":
		secret, err := readSecretFile(fileFlag, path)
		if err != nil {
			return "", usageError{err}
		}
		return secret, nil
	}
	return value, nil
}
