package benchkit

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
)

// Machine describes the host a result was measured on.
type Machine struct {
	NProc     int    `json:"nproc"`
	CPU       string `json:"cpu"`
	MemTotal  string `json:"mem_total"`
	Kernel    string `json:"kernel"`
	GoVersion string `json:"go_version"`
}

// MachineInfo describes this host.
func MachineInfo() Machine {
	kernel, _ := os.ReadFile("/proc/sys/kernel/osrelease")
	return Machine{
		NProc:     runtime.NumCPU(),
		CPU:       procField("/proc/cpuinfo", "model name"),
		MemTotal:  procField("/proc/meminfo", "MemTotal"),
		Kernel:    strings.TrimSpace(string(kernel)),
		GoVersion: runtime.Version(),
	}
}

// procField returns the value of the first "key: value" line of a /proc file, or
// "" when there is none.
func procField(path, key string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	for _, line := range strings.Split(string(b), "\n") {
		if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == key {
			return strings.TrimSpace(v)
		}
	}
	return ""
}

// WriteJSON stores v as indented JSON at path, creating its directory.
func WriteJSON(path string, v any) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return fmt.Errorf("results dir: %w", err)
	}
	js, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return fmt.Errorf("encode results: %w", err)
	}
	if err := os.WriteFile(path, append(js, '\n'), 0o644); err != nil {
		return fmt.Errorf("write results: %w", err)
	}
	return nil
}
