package benchkit

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"

	"github.com/rowlift/rowlift/internal/sandbox"
)

// ClockTicks is the unit of the CPU times in /proc/<pid>/stat (getconf CLK_TCK),
// 100 on every Linux we know of.
func ClockTicks() float64 {
	out, err := exec.Command("getconf", "CLK_TCK").Output()
	if err != nil {
		return 100
	}
	tck, err := strconv.ParseFloat(strings.TrimSpace(string(out)), 64)
	if err != nil || tck <= 0 {
		return 100
	}
	return tck
}

// ProcCPU is the user+system CPU seconds a running process has used, from
// /proc/<pid>/stat.
func ProcCPU(pid int, clkTck float64) (float64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, fmt.Errorf("CPU time of pid %d: %w", pid, err)
	}
	// The command name (field 2) may hold spaces; fields 3 on follow its ')'.
	s := string(b)
	fields := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	if len(fields) < 13 {
		return 0, fmt.Errorf("CPU time of pid %d: short /proc stat %q", pid, s)
	}
	utime, err1 := strconv.ParseFloat(fields[11], 64) // field 14
	stime, err2 := strconv.ParseFloat(fields[12], 64) // field 15
	if err1 != nil || err2 != nil {
		return 0, fmt.Errorf("CPU time of pid %d: bad /proc stat %q", pid, s)
	}
	return (utime + stime) / clkTck, nil
}

// ServerCPU is the CPU seconds a sandbox server has used; it fails with the end
// of the server's error log when the server is not running.
func ServerCPU(s *sandbox.Server, clkTck float64) (float64, error) {
	pid := s.Pid()
	if pid == 0 {
		return 0, errors.New("server in " + s.Dir + " is not running:\n" + sandbox.Tail(s.ErrorLog(), 20))
	}
	return ProcCPU(pid, clkTck)
}

// SelfCPU is the user+system CPU seconds this process has used.
func SelfCPU() float64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return float64(ru.Utime.Nano()+ru.Stime.Nano()) / 1e9
}

// CPUUse is CPU seconds by process of a run with one streamer and one applier
// between a source and a target, and of the benchmark itself (its load and
// probes): what each process spent on a span a benchmark measures under load.
type CPUUse struct {
	Streamer float64 `json:"streamer"`
	Applier  float64 `json:"applier"`
	Source   float64 `json:"source_server"`
	Target   float64 `json:"target_server"`
	Bench    float64 `json:"bench"`
}

// PairCPU is the CPU seconds each process has used so far; a span's use is
// the difference of two readings (Sub).
func PairCPU(streamer, applier *Proc, source, target *sandbox.Server, clkTck float64) (CPUUse, error) {
	var c CPUUse
	var errs [4]error
	c.Streamer, errs[0] = streamer.CPU(clkTck)
	c.Applier, errs[1] = applier.CPU(clkTck)
	c.Source, errs[2] = ServerCPU(source, clkTck)
	c.Target, errs[3] = ServerCPU(target, clkTck)
	c.Bench = SelfCPU()
	return c, errors.Join(errs[:]...)
}

// Sub is c minus o, process by process.
func (c CPUUse) Sub(o CPUUse) CPUUse {
	return CPUUse{c.Streamer - o.Streamer, c.Applier - o.Applier, c.Source - o.Source, c.Target - o.Target, c.Bench - o.Bench}
}
