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

// devMysqldStarting is what `rowlift dev mysqld` says before it starts the
// server.
const devMysqldStarting = "starting a throwaway server (the first run on this machine initializes a datadir, a minute or two) ..."

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
			fs.StringVar(&root, "root", "", "`DIR` for instance datadirs (default $"+sandbox.RootEnv+", else /dev/shm/rowlift-sandbox on a tmpfs with 8 GiB free, else <tmp>/rowlift-sandbox)")
			fs.Var(&args, "arg", "extra server `OPTION`, repeatable (e.g. --arg=--innodb-flush-log-at-trx-commit=1)")
		},
		exec: func(ctx context.Context, fs *flag.FlagSet, stdout io.Writer) error {
			if flavor != "" && flavor != string(sandbox.MariaDB) && flavor != string(sandbox.MySQL) {
				return usagef("--flavor %s: want mariadb or mysql", flavor)
			}
			// The first start on a machine initializes a template datadir, which
			// takes a minute or two of silence otherwise; said on stderr, so that
			// stdout holds only the server's details, for a script to read.
			fmt.Fprintln(fs.Output(), devMysqldStarting)
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
