package benchkit

import (
	"bufio"
	"fmt"
	"os"
	"strconv"
	"strings"
)

// PeakRSS is the most resident memory the process has had, in bytes, since it
// started or since the last ResetPeakRSS (VmHWM in /proc/<pid>/status): what a
// benchmark compares with a documented memory ceiling.
func (p *Proc) PeakRSS() (int64, error) {
	pid := p.cmd.Process.Pid
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, fmt.Errorf("peak RSS of rowlift %s: %w", p.Role, err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		rest, ok := strings.CutPrefix(sc.Text(), "VmHWM:")
		if !ok {
			continue
		}
		kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
		if err != nil {
			return 0, fmt.Errorf("peak RSS of rowlift %s: %q: %w", p.Role, rest, err)
		}
		return kb << 10, nil
	}
	return 0, fmt.Errorf("peak RSS of rowlift %s: no VmHWM in /proc/%d/status", p.Role, pid)
}

// ResetPeakRSS starts the process's peak RSS again from its current RSS
// (Linux 4.0+), so each method of a run gets a peak of its own from
// long-lived processes.
func (p *Proc) ResetPeakRSS() error {
	if err := os.WriteFile(fmt.Sprintf("/proc/%d/clear_refs", p.cmd.Process.Pid), []byte("5"), 0); err != nil {
		return fmt.Errorf("reset peak RSS of rowlift %s: %w", p.Role, err)
	}
	return nil
}
