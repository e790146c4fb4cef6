package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"strconv"
)

// mydumper is (e): mydumper dumps the source table with its default threads
// into a temp dir, then myloader loads that dir into an empty database on the
// target, the usual parallel way to copy a table by hand. Both connect as the
// other methods do (root over TCP to 127.0.0.1). The time runs from mydumper's
// start to myloader's end; the client CPU is that of mydumper and myloader.
// mydumper 0.10 takes -T as bare table names beside -B: given db.table it
// dumps no table and exits 0, which the row count after the load catches.
// myloader runs with --enable-binlog: by default it turns the binlog off for
// its session, which would spare it the binlog every other method writes.
func (b *bench) mydumper(ctx context.Context, m *meter) error {
	const db = "bench_mydumper"
	dumper, err := mydumperTool("mydumper")
	if err != nil {
		return err
	}
	loader, err := mydumperTool("myloader")
	if err != nil {
		return err
	}
	if err := b.resetTarget(ctx, db); err != nil {
		return err
	}
	dir, err := os.MkdirTemp(b.tmp, "mydumper-")
	if err != nil {
		return fmt.Errorf("mydumper: %w", err)
	}
	defer os.RemoveAll(dir)
	dump := exec.CommandContext(ctx, dumper, "-h", "127.0.0.1", "-P", strconv.Itoa(b.Source.Port), "-u", "root",
		"-B", sourceDB, "-T", b.shape.Name, "-o", dir)
	load := exec.CommandContext(ctx, loader, "-h", "127.0.0.1", "-P", strconv.Itoa(b.Target.Port), "-u", "root",
		"-d", dir, "-s", sourceDB, "-B", db, "--enable-binlog")
	if err := m.start(); err != nil {
		return err
	}
	if err := runLogged(dump); err != nil {
		return err
	}
	if err := runLogged(load); err != nil {
		return err
	}
	if err := m.stop(); err != nil {
		return err
	}
	m.s.ClientCPUS = cpuSeconds(dump) + cpuSeconds(load)
	return b.checkCount(ctx, db, b.cfg.Rows)
}

// mydumperTool is the path of mydumper or myloader; when missing, the error
// says how to install them.
func mydumperTool(name string) (string, error) {
	path, err := exec.LookPath(name)
	if err != nil {
		return "", fmt.Errorf("%s is not installed (%w): run `make bench-setup` to install mydumper and myloader, or leave e out of -methods", name, err)
	}
	return path, nil
}

// runLogged runs cmd and fails with its output when it fails or prints an
// error: mydumper 0.10 logs a failed query as critical on stderr and may still
// exit 0.
func runLogged(cmd *exec.Cmd) error {
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	if err == nil && bytes.Contains(out.Bytes(), []byte("CRITICAL")) {
		err = fmt.Errorf("it logged a critical error")
	}
	if err != nil {
		return fmt.Errorf("%s: %w\n%s", cmd, err, out.String())
	}
	return nil
}
