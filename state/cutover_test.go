package state_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rowlift/rowlift/internal/sandbox"
	"github.com/rowlift/rowlift/internal/sandbox/sandboxtest"
	"github.com/rowlift/rowlift/state"
)

// TestJournalStepsKeepTheFirstAndTheLatest: Enter adds each step, the same
// step again too, and past the bound drops the oldest but the first.
func TestJournalStepsKeepTheFirstAndTheLatest(t *testing.T) {
	start := time.Unix(1_900_000_000, 0)
	j := &state.Journal{Message: "earlier"}
	j.Enter("freezing", "", start)
	require.Equal(t, []state.JournalStep{{Step: "freezing", AtUS: start.UnixMicro()}}, j.Steps)
	require.Equal(t, "earlier", j.Message, "a step without a reason keeps the message")
	j.Enter("frozen", "", start.Add(time.Millisecond))
	for i := range 40 {
		j.Enter("frozen", "the freeze lock was lost", start.Add(time.Duration(2+i)*time.Millisecond))
	}
	require.Equal(t, "frozen", j.Step)
	require.Equal(t, "the freeze lock was lost", j.Message)
	require.Len(t, j.Steps, 32)
	require.Equal(t, state.JournalStep{Step: "freezing", AtUS: start.UnixMicro()}, j.Steps[0], "the first step stays")
	require.Equal(t, start.Add(11*time.Millisecond).UnixMicro(), j.Steps[1].AtUS, "the oldest after it went")
	require.Equal(t, state.JournalStep{Step: "frozen", AtUS: start.Add(41 * time.Millisecond).UnixMicro(), Message: "the freeze lock was lost"}, j.Steps[31])
}

// TestJournalSteps: a journal's steps are saved with it, and a journal an
// older version wrote, with none, still reads.
func TestJournalSteps(t *testing.T) {
	sandboxtest.EachFlavor(t, func(t *testing.T, flavor sandbox.Flavor) {
		store, db := openStore(t, flavor)
		ctx := context.Background()
		_, err := db.ExecContext(ctx, `INSERT INTO _rowlift.cutover (workflow, step, journal) VALUES ('old', 'done', '{"workflow":"old",`+
			`"partner":"old_reverse","direction":"switch","step":"done","mode":1,"unfreeze_mode":3,"timeout_ms":60000,`+
			`"freeze_positions":{"main":"0-1-9"},"started_at_us":1700000000000000,"freeze_at_us":1700000000100000,`+
			`"writable_at_us":1700000000148000,"deadline_us":1700000060000000,"finished_at_us":1700000000200000}')`)
		require.NoError(t, err)
		old, err := store.Journal(ctx, "old")
		require.NoError(t, err)
		require.Equal(t, "done", old.Step)
		require.Equal(t, map[string]string{"main": "0-1-9"}, old.FreezePositions)
		require.EqualValues(t, 48, old.WritePauseMS())
		require.Empty(t, old.Steps)

		j := &state.Journal{Workflow: "new", Direction: "reverse"}
		start := time.UnixMicro(1_900_000_000_000_000)
		j.Enter("freezing", "", start)
		j.Enter("frozen", "", start.Add(time.Second))
		j.Enter("rolling_back", "the deadline passed", start.Add(2*time.Second))
		require.NoError(t, store.SaveJournal(ctx, j))
		got, err := store.Journal(ctx, "new")
		require.NoError(t, err)
		require.Equal(t, j.Steps, got.Steps)
		require.Equal(t, "rolling_back", got.Step)
	})
}
