package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"github.com/rowlift/rowlift/internal/statustext"
	"io"
	"os"
	"strings"
	"time"

	"golang.org/x/sys/unix"
	"google.golang.org/protobuf/encoding/protojson"

	rowliftv1 "github.com/rowlift/rowlift/proto/rowlift/v1"
)

// phaseRank orders the phases a workflow goes through, for --until: a watch
// waiting for a phase also ends at any later one it may have skipped between two
// updates.
var phaseRank = map[string]int{"init": 1, "copying": 2, "catching up": 3, "running": 4, "cutover": 5, "done": 6}

func workflowWatchCommand() *command {
	var (
		targets  stringList
		interval time.Duration
		until    string
	)
	return workflowLeaf("watch", "follow a workflow live until it is done, stopped or failed (or Ctrl-C)",
		"NAME [flags]\n\n"+
			"On a terminal the view is redrawn in place: phase, lag, ETA, throttle, a progress bar per table\n"+
			"and overall, the streams and the last error. Otherwise it prints one line per update, and with\n"+
			"--output json one JSON object per line. It exits 1 if the workflow fails, or stops before --until.\n\n"+
			"Examples:\n"+
			"  rowlift workflow watch orders --coordinator 10.0.0.9:7000\n"+
			"  rowlift workflow watch orders --until running && echo \"copied and caught up\"", 1,
		func(fs *flag.FlagSet) {
			targetsFlag(fs, &targets)
			fs.DurationVar(&interval, "interval", time.Second, "time between updates, e.g. --interval 5s")
			fs.StringVar(&until, "until", "", "also end once the workflow reaches `PHASE` or a later one: copying, catching-up (copy done),\n"+
				"running (copy done and lag at most 5s), cutover or done; default only done, stopped or failed, e.g. --until running")
		},
		func(ctx context.Context, s *session, args []string) error {
			until = strings.ReplaceAll(until, "-", " ")
			if _, ok := phaseRank[until]; until != "" && !ok {
				return usagef("--until %q: want copying, catching-up, running, cutover or done", until)
			}
			if interval <= 0 {
				return usagef("--interval %s: must be positive", interval)
			}
			return watch(ctx, s, &rowliftv1.WatchWorkflowRequest{
				Workflow:   &rowliftv1.WorkflowRef{Name: args[0], Targets: targets},
				IntervalMs: interval.Milliseconds(),
			}, until)
		})
}

// watch shows the workflow's updates until watchEnd says so, the coordinator ends
// the stream, or ctx is cancelled (Ctrl-C), which is a normal end.
func watch(ctx context.Context, s *session, req *rowliftv1.WatchWorkflowRequest, until string) error {
	name := req.GetWorkflow().GetName()
	what := "watch workflow " + name
	// --timeout bounds the wait for the first update only: later ones come at the
	// workflow's pace, for as long as the operator watches.
	streamCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	firstTimeout := time.AfterFunc(s.flags.timeout, cancel)
	stream, err := s.client.WatchWorkflow(streamCtx, req)
	if err != nil {
		return s.rpcError(what, err)
	}
	show := watchOutput(s.stdout, s.flags.output)
	for {
		w, err := stream.Recv()
		firstTimeout.Stop()
		switch {
		case ctx.Err() != nil:
			return nil
		case err != nil && streamCtx.Err() != nil:
			return fmt.Errorf("%s: no update from the coordinator at %s within --timeout %s", what, s.flags.coordinator, s.flags.timeout)
		case errors.Is(err, io.EOF):
			return fmt.Errorf("%s: the coordinator ended the watch: the workflow was deleted", what)
		case err != nil:
			return s.rpcError(what, err)
		}
		if err := show(w, time.Now()); err != nil {
			return fmt.Errorf("%s: %w", what, err)
		}
		if end, err := watchEnd(w.GetStatus(), until); end {
			if err != nil {
				return fmt.Errorf("%s: %w", what, err)
			}
			return nil
		}
	}
}

// watchEnd says whether a watch ends at status st, and with which error: a failed
// workflow, or one stopped before the phase the watch waits for.
func watchEnd(st *rowliftv1.WorkflowStatus, until string) (bool, error) {
	phase := statustext.Phase(st)
	why := st.GetMessage()
	switch phase {
	case "error":
		if why == "" {
			why = st.GetLastError()
		}
		return true, fmt.Errorf("workflow failed: %s", why)
	case "stopped":
		if until != "" && until != "stopped" {
			return true, fmt.Errorf("workflow stopped before reaching %s: %s", strings.ReplaceAll(until, " ", "-"), why)
		}
		return true, nil
	case "done":
		return true, nil
	}
	return until != "" && phaseRank[phase] >= phaseRank[until], nil
}

// watchOutput picks how updates are shown: JSON lines, a view redrawn in place on
// a terminal, or a line per update for logs and pipes.
func watchOutput(stdout io.Writer, format string) func(*rowliftv1.Workflow, time.Time) error {
	if format == "json" {
		return func(w *rowliftv1.Workflow, _ time.Time) error {
			b, err := protojson.MarshalOptions{EmitUnpopulated: true}.Marshal(w)
			if err != nil {
				return fmt.Errorf("encode update as JSON: %w", err)
			}
			_, err = fmt.Fprintf(stdout, "%s\n", b)
			return err
		}
	}
	if width, ok := terminalWidth(stdout); ok {
		v := &liveView{w: stdout, width: width}
		return func(w *rowliftv1.Workflow, now time.Time) error { return v.draw(renderStatus(w, now)) }
	}
	return func(w *rowliftv1.Workflow, now time.Time) error {
		_, err := fmt.Fprintln(stdout, renderLine(w, now))
		return err
	}
}

// terminalWidth reports whether w is a terminal (not TERM=dumb) and, if so, a
// function that reads its current width in columns, so a resized window is
// followed.
func terminalWidth(w io.Writer) (func() int, bool) {
	f, ok := w.(*os.File)
	if !ok || os.Getenv("TERM") == "dumb" || !isTerminal(f) {
		return nil, false
	}
	return func() int {
		ws, err := unix.IoctlGetWinsize(int(f.Fd()), unix.TIOCGWINSZ)
		if err != nil {
			return 0
		}
		return int(ws.Col)
	}, true
}

// isTerminal reports whether f is a terminal.
func isTerminal(f *os.File) bool {
	_, err := unix.IoctlGetWinsize(int(f.Fd()), unix.TIOCGWINSZ)
	return err == nil
}

// liveView redraws a block of lines in place with ANSI cursor movement: up to the
// block's first line, each line cleared and rewritten, then anything below
// cleared (the previous block may have been longer). Lines are cut to the
// terminal's width, since a wrapped line would make the next redraw start too low.
type liveView struct {
	w     io.Writer
	width func() int
	// lines is how many lines the last draw wrote.
	lines int
}

func (v *liveView) draw(lines []string) error {
	var b strings.Builder
	if v.lines > 0 {
		fmt.Fprintf(&b, "\x1b[%dA", v.lines)
	}
	b.WriteString("\r")
	width := v.width()
	for _, l := range lines {
		b.WriteString("\x1b[2K" + cut(l, width-1) + "\n")
	}
	b.WriteString("\x1b[J")
	v.lines = len(lines)
	_, err := io.WriteString(v.w, b.String())
	return err
}

// cut shortens s to n runes, ending it with "…" when it had more; n < 1 means no limit.
func cut(s string, n int) string {
	if n < 1 {
		return s
	}
	r := []rune(s)
	if len(r) <= n {
		return s
	}
	return string(r[:n-1]) + "…"
}
