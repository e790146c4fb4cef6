package e2e

import (
	"database/sql"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/rowlift/rowlift/internal/sandbox"
	"github.com/rowlift/rowlift/internal/sandbox/sandboxtest"
)

// TestCutoverAfterRollback is issue 23's failure 1, step by step through the
// binary: switch, reverse, a switch that rolls back (its applier is down),
// then, with the applier back, the same switch again. That switch must leave
// the target live and the source frozen; it once unfroze nothing, left both
// sides frozen and reported success. The same for a reverse after a
// rolled-back reverse. Writers follow the live side throughout, and after each
// cutover both sides compare identical once the writers pause.
func TestCutoverAfterRollback(t *testing.T) {
	sandboxtest.EachFlavor(t, testCutoverAfterRollback)
}

func testCutoverAfterRollback(t *testing.T, flavor sandbox.Flavor) {
	const keys = 600
	p := newPairEnv(t, flavor, keys, nil)
	stop, total := p.writers(keys), 0
	p.cutover("switch")
	p.waitWrites("writes on the target after the switch")
	p.cutover("reverse")
	p.waitWrites("writes on the source after the reverse")

	// losing is the side the cutover freezes, gaining the one it gives the
	// writes to; applier applies the freeze position.
	rollBack := func(direction string, applier *proc, losing, gaining *sql.DB) {
		t.Helper()
		applier.kill()
		msg := p.cli.fails(1, "workflow", direction, "race", "--timeout", "3s")
		require.Contains(t, msg, direction+" of \"race\" rolled back")
		require.Contains(t, msg, "did not apply the freeze positions before the deadline")
		p.liveSide(losing)
		p.waitWrites("writes on the side that kept them after the rolled-back " + direction)
		applier.restart()
		p.cutover(direction)
		p.frozenSide(losing)
		p.liveSide(gaining)
		p.waitWrites("writes on the side that gained them after the " + direction)
		total += stop()
		p.identicalAfter(direction)
		stop = p.writers(keys)
	}
	rollBack("switch", p.applier, p.srcDB, p.dstDB)
	rollBack("reverse", p.revApplier, p.dstDB, p.srcDB)
	total += stop()
	require.Greater(t, total, 50, "the writers barely ran")
}
