package metrics

import (
	"context"
	"maps"
	"net"
	"net/http/httptest"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/zap"

	"github.com/rowlift/rowlift/internal/metrics/metricstest"
	"github.com/rowlift/rowlift/internal/sandbox"
)

// newTestInstruments returns instruments on a provider of their own and a
// function that scrapes it.
func newTestInstruments(t *testing.T) (*instruments, func() metricstest.Scrape) {
	t.Helper()
	mp, handler, err := newProvider(BuildInfo{Role: "applier", Version: "v1.2.3", Revision: "abc123"})
	require.NoError(t, err)
	t.Cleanup(func() { _ = mp.Shutdown(context.Background()) })
	in, err := newInstruments(mp.Meter(scope))
	require.NoError(t, err)
	return in, func() metricstest.Scrape {
		rec := httptest.NewRecorder()
		handler.ServeHTTP(rec, httptest.NewRequest("GET", Path, nil))
		require.Equal(t, 200, rec.Code)
		return metricstest.Parse(t, rec.Body)
	}
}

// rowliftNames are the scraped sample names of rowlift's own metrics.
func rowliftNames(s metricstest.Scrape) []string {
	var out []string
	for _, n := range s.Names() {
		if strings.HasPrefix(n, "rowlift_") {
			out = append(out, n)
		}
	}
	return out
}

func TestCatalogIsWhatAScrapeShows(t *testing.T) {
	in, scrape := newTestInstruments(t)
	fresh := scrape()
	require.Equal(t, []string{"rowlift_build_info"}, rowliftNames(fresh), "nothing recorded: only the build's info")
	v, ok := fresh.Sum("rowlift_build_info", map[string]string{"role": "applier", "version": "v1.2.3", "revision": "abc123", "go_version": runtime.Version()})
	require.True(t, ok, "build info labelled with role, version, revision and Go version")
	require.Equal(t, 1.0, v)

	s := in.openApplyStream("wf", "src", "dst", []string{"t1"})
	s.ChunkCommitted("t1", 10, time.Millisecond)
	s.GroupCommitted(2, 5, time.Millisecond)
	s.Conflict()
	s.Retry()
	s.Diverged("t1")
	s.PositionCommitted(time.Now().UnixMicro())
	s.Throttled(true)
	s.Throttled(false)
	in.newWorkflows().Set([][2]string{{"dst", "running"}})
	out := in.newSendStream("wf", []string{"t1"})
	out.Sent(100)
	out.ChunkSent("t1")

	got := scrape()
	require.Equal(t, Catalog(), rowliftNames(got))
	for _, n := range []string{"go_goroutines", "process_cpu_seconds_total"} {
		require.Contains(t, got.Names(), n, "Go runtime and process metrics are on the same registry")
	}
}

func TestApplyStreamRecords(t *testing.T) {
	in, scrape := newTestInstruments(t)
	s := in.openApplyStream("wf", "src", "dst", []string{"t1", "t2"})
	stream := map[string]string{"workflow": "wf", "source": "src", "target": "dst"}
	t1 := map[string]string{"workflow": "wf", "source": "src", "target": "dst", "table": "t1"}
	value := func(got metricstest.Scrape, name string, labels map[string]string) float64 {
		t.Helper()
		v, ok := got.Sum(name, labels)
		require.True(t, ok, "%s%v is scraped", name, labels)
		return v
	}

	got := scrape()
	require.Equal(t, 0.0, value(got, "rowlift_copy_throttled", stream))
	for _, counter := range []string{"rowlift_copy_rows_total", "rowlift_divergences_total", "rowlift_replay_conflicts_total",
		"rowlift_stream_retries_total", "rowlift_copy_throttled_time_seconds_total"} {
		require.Equal(t, 0.0, value(got, counter, stream), "counters show at 0 from the start")
	}
	require.Equal(t, 0.0, value(got, "rowlift_copy_chunks_total", t1))
	_, ok := got.Sum("rowlift_replay_lag_seconds", stream)
	require.False(t, ok, "no lag before the first position commits")

	s.ChunkCommitted("t1", 100, 20*time.Millisecond)
	s.ChunkCommitted("t1", 50, 30*time.Millisecond)
	s.ChunkCommitted("t2", 7, time.Millisecond)
	s.GroupCommitted(3, 8, time.Millisecond)
	s.GroupCommitted(1, 1, time.Millisecond)
	s.Diverged("t1")
	s.Diverged("not-a-table-of-the-stream")
	s.Retry()
	s.Conflict()
	s.Conflict()
	s.PositionCommitted(time.Now().Add(-time.Hour).UnixMicro())
	s.Throttled(true)
	got = scrape()
	require.Equal(t, 150.0, value(got, "rowlift_copy_rows_total", t1))
	require.Equal(t, 157.0, value(got, "rowlift_copy_rows_total", stream))
	require.Equal(t, 2.0, value(got, "rowlift_copy_chunks_total", t1))
	require.Equal(t, 2.0, value(got, "rowlift_copy_chunk_duration_seconds_count", t1))
	require.InDelta(t, 0.05, value(got, "rowlift_copy_chunk_duration_seconds_sum", t1), 1e-9)
	require.Equal(t, 4.0, value(got, "rowlift_replay_transactions_total", stream))
	require.Equal(t, 9.0, value(got, "rowlift_replay_rows_total", stream))
	require.Equal(t, 2.0, value(got, "rowlift_replay_group_transactions_count", stream))
	le2 := maps.Clone(stream)
	le2["le"] = "2"
	require.Equal(t, 1.0, value(got, "rowlift_replay_group_transactions_bucket", le2),
		"the group of 1 is in the bucket up to 2, the group of 3 is not")
	require.Equal(t, 1.0, value(got, "rowlift_divergences_total", t1))
	require.Equal(t, 2.0, value(got, "rowlift_divergences_total", stream), "a table the stream does not know counts under the stream's labels")
	require.Equal(t, 1.0, value(got, "rowlift_stream_retries_total", stream))
	require.Equal(t, 2.0, value(got, "rowlift_replay_conflicts_total", stream))
	require.GreaterOrEqual(t, value(got, "rowlift_replay_lag_seconds", stream), 3600.0)
	require.Equal(t, 1.0, value(got, "rowlift_copy_throttled", stream))

	s.Throttled(false)
	got = scrape()
	require.Equal(t, 0.0, value(got, "rowlift_copy_throttled", stream))
	require.GreaterOrEqual(t, value(got, "rowlift_copy_throttled_time_seconds_total", stream), 0.0)

	s.Close()
	got = scrape()
	for _, gauge := range []string{"rowlift_replay_lag_seconds", "rowlift_binlog_position_age_seconds", "rowlift_copy_throttled"} {
		_, ok := got.Sum(gauge, stream)
		require.False(t, ok, "a closed stream's %s is no longer reported", gauge)
	}
	require.Equal(t, 157.0, value(got, "rowlift_copy_rows_total", stream), "counters stay")
}

func TestWorkflowsCountsByState(t *testing.T) {
	in, scrape := newTestInstruments(t)
	w := in.newWorkflows()
	w.Set([][2]string{{"main", "copying"}, {"main", "copying"}, {"main", "running"}})
	got := scrape()
	for st, want := range map[string]float64{"copying": 2, "running": 1} {
		v, ok := got.Sum("rowlift_workflows", map[string]string{"target": "main", "state": st})
		require.True(t, ok, st)
		require.Equal(t, want, v, st)
	}
	w.Set([][2]string{{"main", "running"}})
	_, ok := scrape().Sum("rowlift_workflows", map[string]string{"state": "copying"})
	require.False(t, ok, "a state no workflow is in any more is not reported")
}

func TestSendStreamRecords(t *testing.T) {
	in, scrape := newTestInstruments(t)
	s := in.newSendStream("wf", []string{"t1"})
	s.Sent(1000)
	s.Sent(24)
	s.ChunkSent("t1")
	s.ChunkSent("t1")
	got := scrape()
	v, _ := got.Sum("rowlift_streamer_sent_bytes_total", map[string]string{"workflow": "wf"})
	require.Equal(t, 1024.0, v)
	v, _ = got.Sum("rowlift_streamer_chunks_sent_total", map[string]string{"workflow": "wf", "table": "t1"})
	require.Equal(t, 2.0, v)
}

func TestServe(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	require.NoError(t, Serve(ctx, "", BuildInfo{}, zap.NewNop()), "an empty address turns metrics off")

	taken, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer taken.Close()
	err = Serve(ctx, taken.Addr().String(), BuildInfo{}, zap.NewNop())
	require.ErrorContains(t, err, "--metrics-listen "+taken.Addr().String())
	require.ErrorContains(t, err, "address already in use")

	port, err := sandbox.FreePort()
	require.NoError(t, err)
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	require.NoError(t, Serve(ctx, addr, BuildInfo{Role: "streamer", Version: "v9"}, zap.NewNop()))
	// Recorded through the package's instruments, which the global provider
	// Serve set now backs.
	s := OpenApplyStream("wf", "src", "dst", []string{"t1"})
	defer s.Close()
	s.ChunkCommitted("t1", 3, time.Millisecond)
	got := metricstest.Get(t, "http://"+addr+Path)
	v, ok := got.Sum("rowlift_copy_rows_total", map[string]string{"workflow": "wf", "table": "t1"})
	require.True(t, ok)
	require.Equal(t, 3.0, v)
	v, ok = got.Sum("rowlift_build_info", map[string]string{"role": "streamer", "version": "v9", "revision": ""})
	require.True(t, ok)
	require.Equal(t, 1.0, v)
}
