package sandbox

import (
	"context"
	"debug/elf"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// rootMarker is the file tools/mysql-root.sh writes last into a finished MySQL root;
// a root without it is an interrupted build and is not used.
const rootMarker = ".rowlift-complete"

// program is how to run a server binary: an installed one directly, or a mysqld of the
// Debian root that `make setup` builds (tools/mysql-root.sh) through that root's own
// dynamic loader and libraries. The root's mysqld runs on host paths, so it needs no
// chroot (and no root privileges), and its pid is the server's own: the loader maps
// mysqld into its process rather than starting another one.
type program struct {
	path string // the server binary
	root string // the Debian root holding it; empty for an installed binary
}

// command runs the program with --no-defaults (the machine's my.cnf must not change a
// sandbox), the root's own directories when it comes from one, then args.
func (p program) command(ctx context.Context, args ...string) (*exec.Cmd, error) {
	opts := []string{"--no-defaults"}
	if p.root == "" {
		return exec.CommandContext(ctx, p.path, append(opts, args...)...), nil
	}
	loader, libs, err := p.loader()
	if err != nil {
		return nil, err
	}
	usr := filepath.Join(p.root, "usr")
	opts = append(opts,
		"--basedir="+usr,
		"--lc-messages-dir="+filepath.Join(usr, "share", "mysql"),
		"--character-sets-dir="+filepath.Join(usr, "share", "mysql", "charsets"),
		"--plugin-dir="+filepath.Join(usr, "lib", "mysql", "plugin"),
	)
	return exec.CommandContext(ctx, loader, append([]string{"--library-path", libs, p.path}, append(opts, args...)...)...), nil
}

// loader returns the root's dynamic loader (the binary's ELF interpreter, inside the
// root) and the root's library directories: the loader's own and /usr/lib.
func (p program) loader() (loader, libs string, err error) {
	f, err := elf.Open(p.path)
	if err != nil {
		return "", "", fmt.Errorf("read %s: %w", p.path, err)
	}
	defer f.Close()
	for _, prog := range f.Progs {
		if prog.Type != elf.PT_INTERP {
			continue
		}
		b := make([]byte, prog.Filesz)
		if _, err := prog.ReadAt(b, 0); err != nil {
			return "", "", fmt.Errorf("read the interpreter of %s: %w", p.path, err)
		}
		loader = filepath.Join(p.root, strings.TrimRight(string(b), "\x00"))
		// The root's links are relative (lib64 -> usr/lib64 -> ../lib/<triplet>/...),
		// so they resolve inside the root.
		real, err := filepath.EvalSymlinks(loader)
		if err != nil {
			return "", "", fmt.Errorf("the loader of %s: %w", p.path, err)
		}
		return loader, filepath.Dir(real) + ":" + filepath.Join(p.root, "usr", "lib"), nil
	}
	return "", "", fmt.Errorf("%s has no ELF interpreter", p.path)
}

// version returns the program's --version line.
func (p program) version() (string, error) {
	cmd, err := p.command(context.Background(), "--version")
	if err != nil {
		return "", err
	}
	out, err := cmd.Output()
	return strings.TrimSpace(string(out)), err
}

// findProgram finds the server binary of a flavor and its version string: an installed
// one first, then, for MySQL, the root that `make setup` builds.
func findProgram(flavor Flavor) (program, string, error) {
	dirs := append(filepath.SplitList(os.Getenv("PATH")), "/usr/sbin", "/usr/local/sbin", "/usr/local/mysql/bin")
	root := ""
	if flavor == MySQL {
		root = mysqlRoot()
	}
	return findProgramIn(flavor, dirs, root)
}

// mysqlRoot is where tools/mysql-root.sh builds the MySQL root.
func mysqlRoot() string {
	cache, err := os.UserCacheDir()
	if err != nil {
		return ""
	}
	return filepath.Join(cache, "rowlift", "mysql-root")
}

// findProgramIn looks for the flavor's binary in dirs, then in root (if not empty and
// complete). For MySQL it skips binaries that are MariaDB under the name mysqld.
func findProgramIn(flavor Flavor, dirs []string, root string) (program, string, error) {
	names := []string{"mariadbd", "mysqld"}
	if flavor == MySQL {
		names = []string{"mysqld"}
	}
	var candidates []program
	for _, name := range names {
		for _, dir := range dirs {
			candidates = append(candidates, program{path: filepath.Join(dir, name)})
		}
	}
	looked := fmt.Sprintf("looked for %s in %s", strings.Join(names, ", "), strings.Join(dirs, ":"))
	if root != "" {
		looked += " and in the MySQL root " + root
		if _, err := os.Stat(filepath.Join(root, rootMarker)); err == nil {
			candidates = append(candidates, program{path: filepath.Join(root, "usr", "sbin", "mysqld"), root: root})
		}
	}
	for _, p := range candidates {
		if st, err := os.Stat(p.path); err != nil || st.IsDir() {
			continue
		}
		v, err := p.version()
		if err != nil {
			continue
		}
		if isMariaDB := strings.Contains(v, "MariaDB"); isMariaDB == (flavor == MariaDB) {
			return p, v, nil
		}
	}
	return program{}, "", fmt.Errorf("%w for flavor %s (%s): run `make setup`", ErrNoServer, flavor, looked)
}
