// Package grafana_test keeps deploy/grafana/rowlift.json honest: every query
// names a metric a rowlift process exports, so a renamed instrument or a typo
// fails CI instead of leaving an empty panel in production.
package grafana_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/rowlift/rowlift/internal/grpcopt"
	"github.com/rowlift/rowlift/internal/metrics"
	"github.com/rowlift/rowlift/internal/metrics/metricstest"
	"github.com/rowlift/rowlift/internal/sandbox"
	rowliftv1 "github.com/rowlift/rowlift/proto/rowlift/v1"
)

// dashboard is the part of Grafana's dashboard model the checks read.
type dashboard struct {
	Title      string  `json:"title"`
	UID        string  `json:"uid"`
	Panels     []panel `json:"panels"`
	Templating struct {
		List []struct {
			Name       string  `json:"name"`
			Type       string  `json:"type"`
			Query      any     `json:"query"`
			Datasource *source `json:"datasource"`
		} `json:"list"`
	} `json:"templating"`
}

// source is a panel's or a variable's data source.
type source struct {
	UID string `json:"uid"`
}

// fromVariable says whether s is the dashboard's ${datasource} variable,
// which lets an import pick the operator's Prometheus.
func (s *source) fromVariable() bool { return s != nil && s.UID == "${datasource}" }

type panel struct {
	ID         int     `json:"id"`
	Type       string  `json:"type"`
	Title      string  `json:"title"`
	Datasource *source `json:"datasource"`
	GridPos    struct {
		H, W, X, Y int
	} `json:"gridPos"`
	Targets []struct {
		RefID string `json:"refId"`
		Expr  string `json:"expr"`
	} `json:"targets"`
}

var (
	// labelLists are the label-name lists of aggregations and vector matching,
	// whose names are labels, not metrics.
	labelLists = regexp.MustCompile(`\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)`)
	// strLiteral is a PromQL string, whose text may look like anything.
	strLiteral = regexp.MustCompile(`"(?:[^"\\]|\\.)*"`)
	// selectors are label matchers and range selectors.
	selectors  = regexp.MustCompile(`\{[^}]*\}|\[[^\]]*\]`)
	identifier = regexp.MustCompile(`\b[a-zA-Z_:][a-zA-Z0-9_:]*\b\s*\(?`)
	// labelValues is Grafana's template query label_values(METRIC, LABEL).
	labelValues = regexp.MustCompile(`^label_values\(\s*([a-zA-Z_:][a-zA-Z0-9_:]*)`)
)

// keywords are PromQL words that look like identifiers but name no metric.
var keywords = []string{"and", "or", "unless", "bool", "offset", "inf", "nan"}

// metricNames returns the metrics a PromQL expression selects: identifiers
// that are neither functions, keywords, label names nor inside strings,
// matchers or ranges.
func metricNames(expr string) []string {
	for _, re := range []*regexp.Regexp{strLiteral, labelLists, selectors} {
		expr = re.ReplaceAllString(expr, " ")
	}
	var names []string
	for _, m := range identifier.FindAllString(expr, -1) {
		m = strings.TrimSpace(m)
		if strings.HasSuffix(m, "(") || slices.Contains(keywords, strings.ToLower(m)) {
			continue
		}
		names = append(names, m)
	}
	return names
}

func TestMetricNames(t *testing.T) {
	for expr, want := range map[string][]string{
		`sum by (workflow, table) (rowlift_copy_rows_total{workflow=~"$workflow"})`:                       {"rowlift_copy_rows_total"},
		`histogram_quantile(0.95, sum by (le) (rate(rowlift_copy_chunk_duration_seconds_bucket[5m])))`:    {"rowlift_copy_chunk_duration_seconds_bucket"},
		`sum(rate(a_sum[1m])) / on (job) group_left (x) sum(rate(a_count{l="by (x) { }"}[1m])) offset 5m`: {"a_sum", "a_count"},
		`max without (instance) (up) > bool 0 and unless_typo`:                                            {"up", "unless_typo"},
		`rate (process_cpu_seconds_total[$__rate_interval])`:                                              {"process_cpu_seconds_total"},
		`1 - 2`: nil,
	} {
		require.Equal(t, want, metricNames(expr), expr)
	}
}

// check returns what is wrong with the dashboard: its shape, and every query's
// metric that exported says rowlift does not export.
func check(raw []byte, exported func(string) bool) []error {
	var d dashboard
	dec := json.NewDecoder(strings.NewReader(string(raw)))
	if err := dec.Decode(&d); err != nil {
		return []error{fmt.Errorf("decode: %w", err)}
	}
	var errs []error
	if d.Title == "" || d.UID == "" {
		errs = append(errs, fmt.Errorf("the dashboard needs a title and a uid (imports match on the uid)"))
	}
	seen := map[int]bool{}
	var exprs []string
	for _, p := range d.Panels {
		if seen[p.ID] {
			errs = append(errs, fmt.Errorf("panel %q: id %d used twice", p.Title, p.ID))
		}
		seen[p.ID] = true
		if p.GridPos.W <= 0 || p.GridPos.H <= 0 || p.GridPos.X+p.GridPos.W > 24 {
			errs = append(errs, fmt.Errorf("panel %q: gridPos %+v leaves the 24-column grid", p.Title, p.GridPos))
		}
		if p.Type == "row" {
			continue
		}
		if !p.Datasource.fromVariable() {
			errs = append(errs, fmt.Errorf("panel %q: datasource must be the ${datasource} variable, so an import picks the operator's Prometheus", p.Title))
		}
		if len(p.Targets) == 0 {
			errs = append(errs, fmt.Errorf("panel %q has no query", p.Title))
		}
		refs := map[string]bool{}
		for _, tg := range p.Targets {
			if tg.RefID == "" || refs[tg.RefID] {
				errs = append(errs, fmt.Errorf("panel %q: refId %q missing or used twice", p.Title, tg.RefID))
			}
			refs[tg.RefID] = true
			if len(metricNames(tg.Expr)) == 0 {
				errs = append(errs, fmt.Errorf("panel %q: query %q names no metric", p.Title, tg.Expr))
			}
			exprs = append(exprs, tg.Expr)
		}
	}
	var names []string
	for _, e := range exprs {
		names = append(names, metricNames(e)...)
	}
	for _, v := range d.Templating.List {
		q, ok := v.Query.(map[string]any)
		if v.Type != "query" || !ok {
			continue
		}
		if !v.Datasource.fromVariable() {
			errs = append(errs, fmt.Errorf("variable %s: datasource must be the ${datasource} variable", v.Name))
		}
		m := labelValues.FindStringSubmatch(fmt.Sprint(q["query"]))
		if m == nil {
			errs = append(errs, fmt.Errorf("variable %s: want a label_values(METRIC, LABEL) query, not %v", v.Name, q["query"]))
			continue
		}
		names = append(names, m[1])
	}
	slices.Sort(names)
	for _, n := range slices.Compact(names) {
		if !exported(n) {
			errs = append(errs, fmt.Errorf("metric %s is not exported by rowlift (its own: internal/metrics Catalog; others: a live scrape)", n))
		}
	}
	return errs
}

// liveNames scrapes a metrics server of this process after one gRPC call
// through rowlift's own server and client options, so the gRPC, Go runtime and
// process metrics are there under the names a rowlift process exports.
func liveNames(t *testing.T) []string {
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	port, err := sandbox.FreePort()
	require.NoError(t, err)
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	require.NoError(t, metrics.Serve(ctx, addr, metrics.BuildInfo{Role: "coordinator"}, zap.NewNop()))

	lis, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	gs := grpc.NewServer(grpcopt.ServerOptions(nil)...)
	rowliftv1.RegisterControlServer(gs, rowliftv1.UnimplementedControlServer{})
	go gs.Serve(lis) //nolint:errcheck // ends with Stop below
	t.Cleanup(gs.Stop)
	conn, err := grpc.NewClient(lis.Addr().String(), grpcopt.DialOptions(nil)...)
	require.NoError(t, err)
	t.Cleanup(func() { conn.Close() })
	// Health checks are not measured (kubelet probes would drown the rest):
	// a Control call is, and its error feeds the error panel's series.
	_, err = rowliftv1.NewControlClient(conn).GetWorkflow(ctx, &rowliftv1.WorkflowRef{Name: "w"})
	require.Equal(t, codes.Unimplemented, status.Code(err))
	// The server records a call when its handler ends, which can be after
	// the client has the answer: scrape until the call is there.
	var names []string
	require.Eventually(t, func() bool {
		names = metricstest.Get(t, "http://"+addr+metrics.Path).Names()
		return slices.Contains(names, "rpc_server_call_duration_seconds_count")
	}, 10*time.Second, 10*time.Millisecond, "the server never recorded the call")
	return names
}

func TestDashboardQueriesExportedMetrics(t *testing.T) {
	raw, err := os.ReadFile("rowlift.json")
	require.NoError(t, err)
	live := liveNames(t)
	exported := func(name string) bool {
		if strings.HasPrefix(name, "rowlift_") {
			return slices.Contains(metrics.Catalog(), name)
		}
		return slices.Contains(live, name)
	}
	require.Empty(t, check(raw, exported))

	// The same check fails on the mistakes it is there for.
	for _, bad := range []struct{ from, to, want string }{
		{"rowlift_replay_lag_seconds{", "rowlift_replay_lag_second{", "metric rowlift_replay_lag_second is not exported"},
		{"process_resident_memory_bytes{", "process_resident_memory{", "metric process_resident_memory is not exported"},
		{`"uid": "${datasource}"`, `"uid": "prometheus"`, "variable workflow: datasource must be the ${datasource} variable"},
		{`"uid": "${datasource}"
      },
      "gridPos"`, `"uid": "prometheus"
      },
      "gridPos"`, `panel "Workflows by state": datasource must be`},
		{"label_values(rowlift_copy_rows_total", "label_values(rowlift_copy_row", "metric rowlift_copy_row is not exported"},
	} {
		mutated := strings.Replace(string(raw), bad.from, bad.to, 1)
		require.NotEqual(t, string(raw), mutated, "the mutation %q must apply", bad.from)
		require.Contains(t, fmt.Sprint(check([]byte(mutated), exported)), bad.want)
	}
}
