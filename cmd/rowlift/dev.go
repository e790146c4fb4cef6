package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"strings"

	"github.com/rowlift/rowlift/internal/sandbox"
)

// stringList is a repeatable string flag.
type stringList []string

func (l *stringList) String() string     { return strings.Join(*l, " ") }
func (l *stringList) Set(v string) error { *l = append(*l, v); return nil }

func devMysqldCommand() *command {
	var (
		flavor string
		root   string
		args   stringList
	)
	return &command{
		name:    "mysqld",
		summary: "start a throwaway server set up for rowlift and keep it until Ctrl-C",
		usage:   "[--flavor mariadb|mysql] [--root DIR] [--arg --option=value ...]",
		flags: func(fs *flag.FlagSet) {
			fs.StringVar(&flavor, "flavor", "", "server `FLAVOR`: mariadb or mysql (default $"+sandbox.FlavorEnv+", else mariadb)")
			fs.StringVar(&root, "root", "", "`DIR` for instance datadirs (default <tmp>/rowlift-sandbox)")
			fs.Var(&args, "arg", "extra server `OPTION`, repeatable (e.g. --arg=--innodb-flush-log-at-trx-commit=1)")
		},
		exec: func(ctx context.Context, _ *flag.FlagSet, stdout io.Writer) error {
			if flavor != "" && flavor != string(sandbox.MariaDB) && flavor != string(sandbox.MySQL) {
				return usagef("--flavor %s: want mariadb or mysql", flavor)
			}
			s, err := sandbox.Start(ctx, sandbox.Options{Flavor: sandbox.Flavor(flavor), Root: root, Args: args})
			if err != nil {
				return err
			}
			fmt.Fprintf(stdout, "%s\n  dsn:       %s\n  socket:    %s\n  datadir:   %s\n  server_id: %d\n  pid:       %d\n"+
				"Press Ctrl-C to stop the server and remove its datadir.\n",
				s.Version, s.DSN(""), s.Socket, s.DataDir, s.ServerID, s.Pid())
			<-ctx.Done()
			fmt.Fprintln(stdout, "stopping server and removing", s.Dir)
			return s.Remove()
		},
	}
}
