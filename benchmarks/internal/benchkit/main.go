package benchkit

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
	"time"
)

// Main runs run under a context that SIGINT and SIGTERM cancel, and exits 1
// with "<name> benchmark: <error>" on stderr when it fails: every benchmark's
// main ends so, and an interrupted run still stops its servers.
func Main(name string, run func(ctx context.Context) error) {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, name+" benchmark:", err)
		os.Exit(1)
	}
}

// Progressf returns the printer of what the benchmark called name is doing:
// its lines go to stderr, prefixed "<name> benchmark: ", so stdout holds only
// the results.
func Progressf(name string) func(format string, args ...any) {
	return func(format string, args ...any) {
		fmt.Fprintf(os.Stderr, name+" benchmark: "+format+"\n", args...)
	}
}

// Header heads every benchmark's results, in the JSON (embedded, its fields
// at the top level) and in the printed table, so results of different runs
// and programs say alike where they were measured.
type Header struct {
	Timestamp     string  `json:"timestamp"`
	Machine       Machine `json:"machine"`
	ServerVersion string  `json:"server_version"`
}

// NewHeader is the Header of a result measured now, on this host, on servers
// of the version given; it saves each report building it by hand.
func NewHeader(serverVersion string) Header {
	return Header{
		Timestamp:     time.Now().UTC().Format(time.RFC3339),
		Machine:       MachineInfo(),
		ServerVersion: serverVersion,
	}
}

// Print writes the header's line that opens every printed table: the server
// version, nproc and CPU, after a blank line.
func (h Header) Print(w io.Writer) {
	fmt.Fprintf(w, "\n%s, nproc=%d, %s\n", h.ServerVersion, h.Machine.NProc, h.Machine.CPU)
}
