package e2e

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/rowlift/rowlift/internal/metrics"
	"github.com/rowlift/rowlift/internal/metrics/metricstest"
	"github.com/rowlift/rowlift/internal/sandbox"
	"github.com/rowlift/rowlift/internal/sandbox/sandboxtest"
	"github.com/rowlift/rowlift/internal/testhook"
	rowliftv1 "github.com/rowlift/rowlift/proto/rowlift/v1"
	"github.com/rowlift/rowlift/state"
)

// TestMetrics scrapes /metrics of a streamer, an applier and a coordinator
// while a workflow copies and then replays, and checks the numbers against
// the workflow's status and the writes made on the source.
func TestMetrics(t *testing.T) {
	sandboxtest.EachFlavor(t, testMetrics)
}

func testMetrics(t *testing.T, flavor sandbox.Flavor) {
	e := newEnvWith(t, sandbox.Options{Flavor: flavor})
	e.sourceExec("CREATE DATABASE metricsdb",
		"CREATE TABLE metricsdb.t1 (id INT PRIMARY KEY, v VARCHAR(40))",
		"CREATE TABLE metricsdb.t2 (id INT PRIMARY KEY, v VARCHAR(40))",
		"INSERT INTO metricsdb.t1 WITH RECURSIVE s(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM s WHERE i < 3000) SELECT i, LEFT(SHA2(i, 256), 40) FROM s",
		"INSERT INTO metricsdb.t2 WITH RECURSIVE s(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM s WHERE i < 2000) SELECT i, LEFT(SHA2(i, 256), 40) FROM s",
		"ANALYZE TABLE metricsdb.t1, metricsdb.t2")
	// Slow chunk applies keep the copy going for a few seconds of scrapes.
	e.hooks = []string{testhook.EnvVar + "=chunk_apply=100-200ms"}
	streamerURL, applierURL, coordinatorURL := freeAddr(t), freeAddr(t), freeAddr(t)
	e.startStreamer("--metrics-listen", streamerURL)
	e.startApplier("--metrics-listen", applierURL)
	c := e.newCLI("--metrics-listen", coordinatorURL)
	for _, u := range []*string{&streamerURL, &applierURL, &coordinatorURL} {
		*u = "http://" + *u + metrics.Path
	}
	// A fresh role's first scrape, before any workflow: its build's info.
	for role, u := range map[string]string{"streamer": streamerURL, "applier": applierURL, "coordinator": coordinatorURL} {
		e.waitFor(role+"'s first scrape", 30*time.Second, func() (bool, string) {
			v, ok := metricstest.Get(t, u).Sum("rowlift_build_info", map[string]string{"role": role})
			return ok && v == 1, fmt.Sprintf("rowlift_build_info{role=%q} = %v (%v)", role, v, ok)
		})
	}
	c.ok("workflow", "create", "--name", "m", "--source", "main="+e.streamerAddr, "--target", "main",
		"--source-database", "metricsdb", "--table", "t1", "--table", "t2", "--chunk-rows", "250", "--start")

	wf := map[string]string{"workflow": "m"}
	stream := map[string]string{"workflow": "m", "source": "main", "target": "main"}
	// Rows copied as the applier reports them, scraped while the copy runs.
	var seen []float64
	e.waitFor("the copy to finish", 2*time.Minute, func() (bool, string) {
		rows, _ := metricstest.Get(t, applierURL).Sum("rowlift_copy_rows_total", wf)
		seen = append(seen, rows)
		w, err := e.store.Workflow(context.Background(), "m")
		if err != nil {
			return false, err.Error()
		}
		return w.State == state.Running, fmt.Sprintf("state %s, rows copied scraped: %v", w.State, seen)
	})
	require.True(t, slices.IsSorted(seen), "rows copied never go down: %v", seen)
	require.True(t, slices.ContainsFunc(seen, func(v float64) bool { return v > 0 && v < 5000 }),
		"a scrape during the copy saw part of the rows: %v", seen)

	var w rowliftv1.Workflow
	require.NoError(t, protojson.Unmarshal([]byte(c.ok("workflow", "show", "m", "--output", "json")), &w))
	require.Equal(t, int64(5000), w.GetStatus().GetRowsCopied())
	applier := metricstest.Get(t, applierURL)
	streamer := metricstest.Get(t, streamerURL)
	value := func(s metricstest.Scrape, name string, labels map[string]string) float64 {
		t.Helper()
		v, ok := s.Sum(name, labels)
		require.True(t, ok, "%s%v is scraped", name, labels)
		return v
	}
	require.Equal(t, float64(w.GetStatus().GetRowsCopied()), value(applier, "rowlift_copy_rows_total", stream), "rows copied as status shows them")
	require.Equal(t, 3000.0, value(applier, "rowlift_copy_rows_total", map[string]string{"workflow": "m", "table": "t1"}))
	require.Equal(t, value(streamer, "rowlift_streamer_chunks_sent_total", wf), value(applier, "rowlift_copy_chunks_total", wf),
		"every chunk item the streamer sent was committed")
	require.GreaterOrEqual(t, value(applier, "rowlift_copy_chunks_total", wf), 20.0, "5,000 rows in chunks of 250")
	require.Greater(t, value(streamer, "rowlift_streamer_sent_bytes_total", wf), 5000.0*40, "at least the rows' values were sent")

	// Replay: three source transactions of 10, 5 and 1 row changes.
	e.sourceExec("INSERT INTO metricsdb.t1 WITH RECURSIVE s(i) AS (SELECT 3001 UNION ALL SELECT i + 1 FROM s WHERE i < 3010) SELECT i, 'new' FROM s",
		"UPDATE metricsdb.t2 SET v = 'changed' WHERE id <= 5",
		"DELETE FROM metricsdb.t1 WHERE id = 1")
	e.waitFor("the three transactions to replay", time.Minute, func() (bool, string) {
		n, _ := metricstest.Get(t, applierURL).Sum("rowlift_replay_transactions_total", stream)
		return n == 3, fmt.Sprintf("%v transactions replayed", n)
	})
	applier = metricstest.Get(t, applierURL)
	require.Equal(t, 16.0, value(applier, "rowlift_replay_rows_total", stream))
	require.Equal(t, 3.0, value(applier, "rowlift_replay_group_transactions_sum", stream))
	require.GreaterOrEqual(t, value(applier, "rowlift_replay_lag_seconds", stream), 0.0, "lag shows per stream")
	require.GreaterOrEqual(t, value(applier, "rowlift_binlog_position_age_seconds", stream), 0.0)
	require.Equal(t, 0.0, value(applier, "rowlift_copy_throttled", stream))
	require.Equal(t, 0.0, value(applier, "rowlift_divergences_total", stream))
	require.Equal(t, 1.0, value(applier, "rowlift_workflows", map[string]string{"target": "main", "state": "running"}))

	// A streamer that dies makes the stream retry.
	require.Equal(t, 0.0, value(applier, "rowlift_stream_retries_total", stream))
	e.streamer.kill()
	e.waitFor("the stream to retry", time.Minute, func() (bool, string) {
		n, _ := metricstest.Get(t, applierURL).Sum("rowlift_stream_retries_total", stream)
		return n > 0, fmt.Sprintf("%v retries", n)
	})
	e.streamer.restart()

	coordinator := metricstest.Get(t, coordinatorURL)
	require.Contains(t, coordinator.Names(), "go_goroutines", "the coordinator serves its metrics too")
	var scraped []string
	for _, s := range []metricstest.Scrape{streamer, applier, coordinator} {
		scraped = append(scraped, s.Names()...)
	}
	for _, name := range metrics.Catalog() {
		require.Contains(t, scraped, name, "every catalog name is scraped")
	}
}
