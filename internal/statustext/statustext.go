// Package statustext writes a workflow's status in the words both the CLI
// and the web console show, so an operator reads the same thing in either.
package statustext

import (
	"fmt"
	"math"
	"strconv"
	"strings"

	rowliftv1 "github.com/rowlift/rowlift/proto/rowlift/v1"
)

// EnumWords turns WORKFLOW_PHASE_CATCHING_UP into "catching up".
func EnumWords(name, prefix string) string {
	return strings.ReplaceAll(strings.ToLower(strings.TrimPrefix(name, prefix)), "_", " ")
}

// Phase is what the workflow is doing, in words: the status's phase, or its
// state from a coordinator that does not report phases.
func Phase(st *rowliftv1.WorkflowStatus) string {
	if p := st.GetPhase(); p != rowliftv1.WorkflowPhase_WORKFLOW_PHASE_UNSPECIFIED {
		return EnumWords(p.String(), "WORKFLOW_PHASE_")
	}
	return EnumWords(st.GetState().String(), "WORKFLOW_STATE_")
}

// StateLine is the phase with the status message, for commands that change state.
func StateLine(st *rowliftv1.WorkflowStatus) string {
	if msg := st.GetMessage(); msg != "" {
		return Phase(st) + " (" + msg + ")"
	}
	return Phase(st)
}

// Percent shows percent with one decimal; a negative percent is unknown.
func Percent(percent float64) string {
	if percent < 0 {
		return "?"
	}
	return strconv.FormatFloat(percent, 'f', 1, 64) + "%"
}

// Count writes n with thousands separators: 1234567 as 1,234,567.
func Count(n int64) string {
	s := strconv.FormatInt(n, 10)
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimPrefix(s, "-")
	var b strings.Builder
	if neg {
		b.WriteByte('-')
	}
	for i, r := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(r)
	}
	return b.String()
}

// byteUnits are the binary units Bytes steps through.
var byteUnits = []string{"B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"}

// Bytes writes a size in binary units with one decimal (87136870 as
// "83.1 MiB", under 1 KiB in bytes), short enough to sit beside a row count;
// the console's app.js mirrors it.
func Bytes(n int64) string {
	if n < 1024 {
		return strconv.FormatInt(n, 10) + " B"
	}
	v, unit := float64(n), 0
	for v >= 1023.95 && unit < len(byteUnits)-1 { // 1023.95 would print as 1024.0
		v /= 1024
		unit++
	}
	// Rounded half up first, as app.js's toFixed does, not half to even.
	return strconv.FormatFloat(math.Round(v*10)/10, 'f', 1, 64) + " " + byteUnits[unit]
}

// Verify is a verify's progress on one line.
func Verify(v *rowliftv1.VerifyStatus) string {
	if v == nil {
		return "never verified"
	}
	what := "verify"
	if v.GetRepair() {
		what = "verify with repair"
	}
	state := "running"
	if v.GetPercent() >= 0 {
		state += ", " + Percent(v.GetPercent())
	}
	switch v.GetState() {
	case rowliftv1.VerifyState_VERIFY_STATE_DONE:
		state = "done"
	case rowliftv1.VerifyState_VERIFY_STATE_CANCELLED:
		state = "cancelled"
		if v.GetPercent() >= 0 {
			state += " at " + Percent(v.GetPercent())
		}
	case rowliftv1.VerifyState_VERIFY_STATE_FAILED:
		state = "failed"
	}
	p := fmt.Sprintf("%s %s: %s rows compared", what, state, Count(v.GetRowsCompared()))
	if n := v.GetMissing() + v.GetExtra() + v.GetDifferent(); n == 0 {
		p += ", no difference"
	} else {
		p += fmt.Sprintf(", %d missing on target, %d extra on target, %d different", v.GetMissing(), v.GetExtra(), v.GetDifferent())
	}
	if v.GetRepair() {
		p += fmt.Sprintf(", %d repaired", v.GetRepaired())
	}
	if m := v.GetMessage(); m != "" {
		p += " (" + m + ")"
	}
	return p
}

// CutoverStep is one step of a cutover's journal: the step, how long after
// the cutover's start (startedAtUS) the journal recorded it, and why, when it
// says; `workflow show` puts the time of day before it, the console its
// browser's.
func CutoverStep(s *rowliftv1.CutoverStep, startedAtUS int64) string {
	p := fmt.Sprintf("%s at +%s ms", EnumWords(s.GetStep(), ""), Count((s.GetAtUs()-startedAtUS)/1000))
	if m := s.GetMessage(); m != "" {
		p += ": " + m
	}
	return p
}

// Switched is what a switch (action "switch") or reverse ("reverse") of
// workflow name did, a line each.
func Switched(action, name string, resp *rowliftv1.SwitchResponse) []string {
	done := map[string]string{"switch": "switched writes of %s to its targets", "reverse": "switched writes of %s back to its sources"}[action]
	lines := []string{fmt.Sprintf(done, name)}
	if c := resp.GetCancelledVerify(); c != "" {
		lines = append(lines, c)
	}
	lines = append(lines, fmt.Sprintf("write pause: %d ms", resp.GetWritePauseMs()),
		"freeze position: "+strings.Join(resp.GetFreezePositions(), ", "),
		"following back: "+map[string]string{"switch": resp.GetReverseWorkflow(), "reverse": name}[action])
	if h := resp.GetHookOutput(); h != "" {
		lines = append(lines, "hook: "+h)
	}
	return lines
}
