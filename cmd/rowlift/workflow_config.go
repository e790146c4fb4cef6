package main

import (
	"bufio"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// applyLayers completes the flags of a workflow command so that the command line
// wins over $ROWLIFT_<FLAG>, which wins over the config file, which wins over the
// defaults. runPath has already applied the command line and then the environment
// to the flags it left (parseFlags); this fills the flags neither set from the
// config file at path, or from the default config file when path is empty and
// that file exists.
func applyLayers(fs *flag.FlagSet, path string) error {
	explicit := path != ""
	if !explicit {
		home, _ := os.UserHomeDir() // no home: only $XDG_CONFIG_HOME can name a default
		path = defaultConfigPath(os.Getenv("XDG_CONFIG_HOME"), home)
		if path == "" {
			return nil
		}
	}
	f, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) && !explicit {
		return nil
	}
	if err != nil {
		return usagef("config file: %w", err)
	}
	defer f.Close()
	entries, err := parseConfig(f)
	if err != nil {
		return usagef("config file %s: %w", path, err)
	}
	return applyConfig(fs, path, entries, workflowConfigKeys())
}

// defaultConfigPath is $XDG_CONFIG_HOME/rowlift/config, else ~/.config/rowlift/config
// (the XDG base directory convention), or empty when neither can be formed.
func defaultConfigPath(xdgConfigHome, home string) string {
	switch {
	case xdgConfigHome != "":
		return filepath.Join(xdgConfigHome, "rowlift", "config")
	case home != "":
		return filepath.Join(home, ".config", "rowlift", "config")
	}
	return ""
}

// configEntry is one "key = value" line of a config file.
type configEntry struct {
	line       int
	key, value string
}

// parseConfig reads "key = value" lines. Keys are flag names (dashes or
// underscores); a value may be double-quoted to keep surrounding spaces; lines
// starting with '#' and blank lines are skipped. A '#' inside a value is part of
// it, since DSNs and SQL may hold one.
func parseConfig(r io.Reader) ([]configEntry, error) {
	var entries []configEntry
	sc := bufio.NewScanner(r)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		key, value, ok := strings.Cut(line, "=")
		key, value = strings.TrimSpace(key), strings.TrimSpace(value)
		if !ok || key == "" {
			return nil, fmt.Errorf("line %d: want \"flag = value\", got %q", n, line)
		}
		if strings.HasPrefix(value, `"`) {
			unquoted, err := strconv.Unquote(value)
			if err != nil {
				return nil, fmt.Errorf("line %d: bad quoted value %s: %w", n, value, err)
			}
			value = unquoted
		}
		entries = append(entries, configEntry{line: n, key: strings.ReplaceAll(strings.TrimLeft(key, "-"), "_", "-"), value: value})
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("read: %w", err)
	}
	return entries, nil
}

// applyConfig sets from entries the flags of fs that the command line and the
// environment left unset. One file serves every workflow command, so a key that is
// a flag of another command (known) is skipped; a key of none is an error, as it
// is most likely a typo that would otherwise be silently ignored.
func applyConfig(fs *flag.FlagSet, path string, entries []configEntry, known map[string]bool) error {
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	for _, e := range entries {
		switch {
		case e.key == "config":
			return usagef("%s:%d: a config file cannot name another one", path, e.line)
		case !known[e.key]:
			return usagef("%s:%d: unknown key %q: not a flag of any `rowlift workflow` command", path, e.line, e.key)
		case set[e.key] || fs.Lookup(e.key) == nil:
			continue
		}
		if err := fs.Set(e.key, e.value); err != nil {
			return usagef("%s:%d: %s = %q: %w", path, e.line, e.key, e.value, err)
		}
	}
	return nil
}

// workflowConfigKeys is every flag name of every workflow command: the keys a
// config file may hold.
func workflowConfigKeys() map[string]bool {
	keys := map[string]bool{}
	for _, c := range workflowCommand().subs {
		fs := flag.NewFlagSet(c.name, flag.ContinueOnError)
		c.flags(fs)
		fs.VisitAll(func(f *flag.Flag) { keys[f.Name] = true })
	}
	return keys
}
