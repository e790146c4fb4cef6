package sandbox

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
)

// Tool is a client program that comes with a server, named for its job; each
// flavor spells it differently.
type Tool string

// The client programs tests and benchmarks run.
const (
	Client     Tool = "client"      // mariadb / mysql
	Dump       Tool = "dump"        // mariadb-dump / mysqldump
	BinlogDump Tool = "binlog-dump" // mariadb-binlog / mysqlbinlog
)

var toolNames = map[Flavor]map[Tool]string{
	MariaDB: {Client: "mariadb", Dump: "mariadb-dump", BinlogDump: "mariadb-binlog"},
	MySQL:   {Client: "mysql", Dump: "mysqldump", BinlogDump: "mysqlbinlog"},
}

// Tool returns a command that runs a client program of the server's flavor
// and installation with --no-defaults then args: a MySQL root's own program
// runs through the root's loader, as its mysqld does.
func (s *Server) Tool(ctx context.Context, tool Tool, args ...string) (*exec.Cmd, error) {
	name := toolNames[s.Flavor][tool]
	if name == "" {
		return nil, fmt.Errorf("no %s program for flavor %s", tool, s.Flavor)
	}
	args = append([]string{"--no-defaults"}, args...)
	if s.prog.root == "" {
		path, err := exec.LookPath(name)
		if err != nil {
			return nil, fmt.Errorf("%s (the %s's %s program): %w: run `make setup`", name, s.Flavor, tool, err)
		}
		return exec.CommandContext(ctx, path, args...), nil
	}
	p := program{path: filepath.Join(s.prog.root, "usr", "bin", name), root: s.prog.root}
	if _, err := os.Stat(p.path); err != nil {
		return nil, fmt.Errorf("%s in the MySQL root: %w: run `make setup`", name, err)
	}
	loader, libs, err := p.loader()
	if err != nil {
		return nil, err
	}
	return exec.CommandContext(ctx, loader, append([]string{"--library-path", libs, p.path}, args...)...), nil
}
