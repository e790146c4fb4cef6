package benchkit

import (
	"context"
	"database/sql"
	"fmt"

	"github.com/rowlift/rowlift/internal/sandbox"
)

// Servers is a benchmark's pair of throwaway servers and a client pool on
// each; every benchmark measures between such a pair, so it starts and ends
// them alike.
type Servers struct {
	Source, Target *sandbox.Server
	SrcDB, TgtDB   *sql.DB
	// Version is SELECT VERSION() of the source, for the results' Header.
	Version string
}

// Start starts the source and the target server with opts, opens a pool on
// each (its DSN followed by params, "" or "?k=v..."), reads the version and
// says so through progress. On error what it started is left in s, for Close.
func (s *Servers) Start(ctx context.Context, opts sandbox.Options, params string, progress func(string, ...any)) error {
	var err error
	if s.Source, err = sandbox.Start(ctx, opts); err != nil {
		return fmt.Errorf("start source server: %w", err)
	}
	if s.Target, err = sandbox.Start(ctx, opts); err != nil {
		return fmt.Errorf("start target server: %w", err)
	}
	if s.SrcDB, err = sql.Open("mysql", s.Source.DSN("")+params); err != nil {
		return fmt.Errorf("open source: %w", err)
	}
	if s.TgtDB, err = sql.Open("mysql", s.Target.DSN("")+params); err != nil {
		return fmt.Errorf("open target: %w", err)
	}
	if err := s.SrcDB.QueryRowContext(ctx, "SELECT VERSION()").Scan(&s.Version); err != nil {
		return fmt.Errorf("source version: %w", err)
	}
	progress("servers up: source %s, target %s (%s)", s.Source.Addr(), s.Target.Addr(), s.Version)
	return nil
}

// ClosePools closes the client pools that are open; a benchmark that keeps
// its servers (copy's -keep) closes only these.
func (s *Servers) ClosePools() {
	for _, pool := range []*sql.DB{s.SrcDB, s.TgtDB} {
		if pool != nil {
			pool.Close()
		}
	}
}

// Remove stops and removes the servers that were started, saying through
// progress when one fails, so a failed run leaves no server behind.
func (s *Servers) Remove(progress func(string, ...any)) {
	for _, srv := range []*sandbox.Server{s.Source, s.Target} {
		if srv != nil {
			if err := srv.Remove(); err != nil {
				progress("remove server: %v", err)
			}
		}
	}
}
