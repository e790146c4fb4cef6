package benchkit

import (
	"context"
	"database/sql"
	"fmt"

	"github.com/rowlift/rowlift/internal/sandbox"
)

// Servers is a benchmark's throwaway servers and a client pool on each: a
// source and a target, which every benchmark measures between, and the extra
// targets of one that splits a table over several (StartExtra), so all start
// and end alike.
type Servers struct {
	Source, Target *sandbox.Server
	SrcDB, TgtDB   *sql.DB
	// Extra and ExtraDBs are the servers StartExtra started, and their pools.
	Extra    []*sandbox.Server
	ExtraDBs []*sql.DB
	// Version is SELECT VERSION() of the source, for the results' Header.
	Version string
}

// Start starts the source and the target server with opts, opens a pool on
// each (its DSN followed by params, "" or "?k=v..."), reads the version and
// says so through progress. On error what it started is left in s, for Close.
func (s *Servers) Start(ctx context.Context, opts sandbox.Options, params string, progress func(string, ...any)) error {
	var err error
	if s.Source, s.SrcDB, err = startOpen(ctx, opts, params); err != nil {
		return fmt.Errorf("source server: %w", err)
	}
	if s.Target, s.TgtDB, err = startOpen(ctx, opts, params); err != nil {
		return fmt.Errorf("target server: %w", err)
	}
	if err := s.SrcDB.QueryRowContext(ctx, "SELECT VERSION()").Scan(&s.Version); err != nil {
		return fmt.Errorf("source version: %w", err)
	}
	progress("servers up: source %s, target %s (%s)", s.Source.Addr(), s.Target.Addr(), s.Version)
	return nil
}

// StartExtra starts n more target servers as Start does, after it. On error
// what it started is left in s, for Remove.
func (s *Servers) StartExtra(ctx context.Context, n int, opts sandbox.Options, params string, progress func(string, ...any)) error {
	for range n {
		srv, db, err := startOpen(ctx, opts, params)
		if srv != nil {
			s.Extra = append(s.Extra, srv)
		}
		if db != nil {
			s.ExtraDBs = append(s.ExtraDBs, db)
		}
		if err != nil {
			return fmt.Errorf("extra target server: %w", err)
		}
		progress("server up: extra target %s", srv.Addr())
	}
	return nil
}

// startOpen starts a server with opts and opens a pool on it; on error it
// returns what it started.
func startOpen(ctx context.Context, opts sandbox.Options, params string) (*sandbox.Server, *sql.DB, error) {
	srv, err := sandbox.Start(ctx, opts)
	if err != nil {
		return nil, nil, fmt.Errorf("start: %w", err)
	}
	db, err := sql.Open("mysql", srv.DSN("")+params)
	if err != nil {
		return srv, nil, fmt.Errorf("open: %w", err)
	}
	return srv, db, nil
}

// ClosePools closes the client pools that are open; a benchmark that keeps
// its servers (copy's -keep) closes only these.
func (s *Servers) ClosePools() {
	for _, pool := range append([]*sql.DB{s.SrcDB, s.TgtDB}, s.ExtraDBs...) {
		if pool != nil {
			pool.Close()
		}
	}
}

// Remove stops and removes the servers that were started, saying through
// progress when one fails, so a failed run leaves no server behind.
func (s *Servers) Remove(progress func(string, ...any)) {
	for _, srv := range append([]*sandbox.Server{s.Source, s.Target}, s.Extra...) {
		if srv != nil {
			if err := srv.Remove(); err != nil {
				progress("remove server: %v", err)
			}
		}
	}
}
