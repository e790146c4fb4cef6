package e2e

import (
	"context"
	"encoding/hex"
	"fmt"
	"net"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/rowlift/rowlift/internal/grpcopt"
	"github.com/rowlift/rowlift/internal/rowcodec"
	"github.com/rowlift/rowlift/internal/sandbox"
	"github.com/rowlift/rowlift/internal/tracing/tracingtest"
	rowliftv1 "github.com/rowlift/rowlift/proto/rowlift/v1"
	"github.com/rowlift/rowlift/state"
)

// childrenOf returns the spans of spans whose parent is one of parents, in
// the same trace.
func childrenOf(spans, parents []tracingtest.Span) []tracingtest.Span {
	var out []tracingtest.Span
	for _, s := range spans {
		for _, p := range parents {
			if slices.Equal(s.GetParentSpanId(), p.GetSpanId()) && slices.Equal(s.GetTraceId(), p.GetTraceId()) {
				out = append(out, s)
				break
			}
		}
	}
	return out
}

// spanAttrs are the attributes rowlift's own spans may carry: names and
// counts, never a row's or a key's value.
var spanAttrs = []string{"rowlift.workflow", "rowlift.source", "rowlift.source_address", "rowlift.target", "rowlift.table",
	"rowlift.rows", "rowlift.bytes", "rowlift.verify", "rowlift.transactions"}

func checkAttrs(t *testing.T, s tracingtest.Span, want map[string]string) {
	t.Helper()
	for _, kv := range s.GetAttributes() {
		require.Contains(t, spanAttrs, kv.GetKey(), "span %s of %s", s.GetName(), s.Service())
	}
	for k, v := range want {
		require.Equal(t, v, tracingtest.Attr(s.GetAttributes(), k).GetStringValue(), "%s of span %s of %s", k, s.GetName(), s.Service())
	}
	for _, k := range []string{"rowlift.rows", "rowlift.bytes"} {
		require.NotNil(t, tracingtest.Attr(s.GetAttributes(), k), "%s of span %s of %s", k, s.GetName(), s.Service())
	}
}

// spanRows is the rowlift.rows attribute of a span.
func spanRows(s tracingtest.Span) int64 {
	return tracingtest.Attr(s.GetAttributes(), "rowlift.rows").GetIntValue()
}

// TestTracesJoinAcrossStreamerAndApplier runs the streamer, the applier and
// the coordinator with OTEL_EXPORTER_OTLP_ENDPOINT pointing at a receiver in
// the test and checks what they export: the coordinator's CreateWorkflow
// and the Validate it calls on the streamer are one trace; each chunk's
// applier span is the child of the streamer span that read and sent it (its
// context rides in the chunk), and so for a verify's chunks; replay makes
// group spans; otelgrpc's spans of the Stream RPC join across the hop. A
// streamer started without the OTel environment sends chunks with no trace
// context at all.
func TestTracesJoinAcrossStreamerAndApplier(t *testing.T) {
	otlp := tracingtest.Start(t)
	e := newEnv(t)
	e.hooks = otlp.Env()
	e.seqTable("tr", "t", 2000)
	e.startStreamer()
	e.startApplier()
	port, err := sandbox.FreePort()
	require.NoError(t, err)
	coordAddr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	startProc(t, "coordinator", otlp.Env(), "coordinator", "--listen", coordAddr, "--target", "main="+e.dst.DSN(""))
	conn, err := grpc.NewClient(coordAddr, grpcopt.DialOptions(nil)...)
	require.NoError(t, err)
	defer conn.Close()
	ctl := rowliftv1.NewControlClient(conn)
	// A probe's health check, which the coordinator does not trace: it ends
	// before CreateWorkflow, so it would be exported no later.
	call(t, func(ctx context.Context) (*healthpb.HealthCheckResponse, error) {
		return healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{})
	})
	spec := e.workflow("traced", "tr", "t")
	spec.Options.ChunkRows = 500
	call(t, func(ctx context.Context) (*rowliftv1.Workflow, error) {
		return ctl.CreateWorkflow(ctx, &rowliftv1.CreateWorkflowRequest{Spec: spec})
	})
	call(t, func(ctx context.Context) (*rowliftv1.Workflow, error) {
		return ctl.StartWorkflow(ctx, &rowliftv1.WorkflowRef{Name: "traced"})
	})
	e.waitState("traced", state.Running, 2*time.Minute)

	// A request follows through the roles: the coordinator's CreateWorkflow
	// validates the workflow on the streamer, in the same trace.
	e.waitFor("the coordinator's CreateWorkflow and its Validate on the streamer, in one trace", 30*time.Second, func() (bool, string) {
		creates := otlp.Named("rowlift-coordinator", "rowlift.v1.Control/CreateWorkflow")
		calls := otlp.Named("rowlift-coordinator", "rowlift.v1.Streamer/Validate")
		served := otlp.Named("rowlift-streamer", "rowlift.v1.Streamer/Validate")
		return len(childrenOf(served, childrenOf(calls, creates))) > 0,
			fmt.Sprintf("%d CreateWorkflow, %d Validate calls, %d Validate served", len(creates), len(calls), len(served))
	})
	require.Empty(t, otlp.Named("rowlift-coordinator", "grpc.health.v1.Health/Check"), "health checks are not traced")
	e.sourceExec("INSERT INTO tr.t VALUES (5001, 'replayed'), (5002, 'replayed')")
	e.waitFor("the replayed rows on the target", time.Minute, func() (bool, string) {
		n := count(t, e.dstDB, "tr.t")
		return n == 2002, fmt.Sprintf("%d rows", n)
	})

	var pairs int
	e.waitFor("applier chunk spans that are children of streamer chunk spans", 30*time.Second, func() (bool, string) {
		sent := map[string]tracingtest.Span{}
		for _, s := range otlp.Named("rowlift-streamer", "rowlift.streamer.chunk") {
			sent[hex.EncodeToString(s.GetSpanId())] = s
		}
		applied := otlp.Named("rowlift-applier", "rowlift.applier.chunk")
		pairs = 0
		for _, a := range applied {
			s, ok := sent[hex.EncodeToString(a.GetParentSpanId())]
			if !ok {
				continue
			}
			require.Equal(t, s.GetTraceId(), a.GetTraceId())
			checkAttrs(t, s, map[string]string{"rowlift.workflow": "traced", "rowlift.table": "t", "rowlift.source_address": e.src.Addr()})
			checkAttrs(t, a, map[string]string{"rowlift.workflow": "traced", "rowlift.table": "t",
				"rowlift.source": "main", "rowlift.target": "main"})
			if spanRows(a) > 0 && spanRows(s) >= spanRows(a) {
				pairs++
			}
		}
		return pairs >= 4, fmt.Sprintf("%d streamer chunk spans, %d applier chunk spans, %d joined", len(sent), len(applied), pairs)
	})
	e.waitFor("a replay group span", 30*time.Second, func() (bool, string) {
		groups := otlp.Named("rowlift-applier", "rowlift.applier.replay_group")
		replayed := int64(0)
		for _, g := range groups {
			checkAttrs(t, g, map[string]string{"rowlift.workflow": "traced", "rowlift.source": "main", "rowlift.target": "main"})
			replayed += spanRows(g)
		}
		return replayed >= 2, fmt.Sprintf("%d replay group spans of %d rows", len(groups), replayed)
	})

	// A verify's chunks are traced the same way.
	call(t, func(ctx context.Context) (*rowliftv1.Workflow, error) {
		return ctl.VerifyWorkflow(ctx, &rowliftv1.VerifyRequest{Workflow: &rowliftv1.WorkflowRef{Name: "traced"}})
	})
	e.waitFor("applier verify spans that are children of streamer verify chunk spans", time.Minute, func() (bool, string) {
		var sent []tracingtest.Span
		for _, s := range otlp.Named("rowlift-streamer", "rowlift.streamer.chunk") {
			if tracingtest.Attr(s.GetAttributes(), "rowlift.verify").GetBoolValue() {
				sent = append(sent, s)
			}
		}
		checked := otlp.Named("rowlift-applier", "rowlift.applier.verify_chunk")
		joined := childrenOf(checked, sent)
		for _, c := range joined {
			checkAttrs(t, c, map[string]string{"rowlift.workflow": "traced", "rowlift.table": "t"})
		}
		return len(joined) > 0 && len(joined) == len(checked),
			fmt.Sprintf("%d streamer verify chunk spans, %d applier verify spans, %d joined", len(sent), len(checked), len(joined))
	})

	// The Stream RPC's spans end with the stream: the applier flushes its
	// own as it exits, the streamer once the call is cancelled.
	e.applier.stop()
	const rpc = "rowlift.v1.Streamer/Stream"
	var server tracingtest.Span
	e.waitFor("otelgrpc spans of the Stream RPC on both sides, joined", 30*time.Second, func() (bool, string) {
		clients, servers := otlp.Named("rowlift-applier", rpc), otlp.Named("rowlift-streamer", rpc)
		joined := childrenOf(servers, clients)
		if len(joined) == 0 {
			return false, fmt.Sprintf("%d client spans, %d server spans", len(clients), len(servers))
		}
		server = joined[0]
		return true, ""
	})
	// Each chunk is a trace of its own, linked to the stream it went out on.
	linked := 0
	for _, s := range otlp.Named("rowlift-streamer", "rowlift.streamer.chunk") {
		require.NotEqual(t, server.GetTraceId(), s.GetTraceId(), "a chunk's tracingtest.Span is a trace of its own")
		for _, l := range s.GetLinks() {
			if slices.Equal(l.GetSpanId(), server.GetSpanId()) {
				linked++
			}
		}
	}
	require.Positive(t, linked, "chunk spans link to the Stream RPC's server span")

	// Without the OTel environment a streamer sends no trace context.
	port, err = sandbox.FreePort()
	require.NoError(t, err)
	plainAddr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	startProc(t, "plain-streamer", nil, "streamer", "--listen", plainAddr, "--source-dsn", e.src.DSN(""))
	chunks := 0
	for _, c := range streamChunks(t, plainAddr, "tr", "t") {
		require.Empty(t, c.GetTraceContext(), "a chunk of a streamer without tracing carries a trace context")
		chunks++
	}
	require.Greater(t, chunks, 1)
	// And with it, each chunk carries its span's W3C traceparent.
	for _, c := range streamChunks(t, e.streamerAddr, "tr", "t") {
		require.True(t, strings.HasPrefix(c.GetTraceContext()["traceparent"], "00-"), "trace context %v", c.GetTraceContext())
	}
}

// streamChunks opens a Stream of table db.table on the streamer at addr, as
// an applier would, and returns the chunks of the table's whole copy.
func streamChunks(t *testing.T, addr, db, table string) []*rowliftv1.Chunk {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpcopt.DialOptions(nil)...)
	require.NoError(t, err)
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var stream grpc.ServerStreamingClient[rowliftv1.StreamResponse]
	require.Eventually(t, func() bool { // the streamer may still be starting
		stream, err = rowliftv1.NewStreamerClient(conn).Stream(ctx, &rowliftv1.StreamRequest{Protocol: rowcodec.StreamProtocol,
			Workflow: "probe", Database: db, Tables: []*rowliftv1.TableRequest{{Name: table}},
			Options: &rowliftv1.StreamOptions{ChunkRows: 500}})
		if err != nil {
			return false
		}
		_, err = stream.Header()
		return err == nil
	}, 30*time.Second, 50*time.Millisecond, "open a stream on %s: %v", addr, err)
	var chunks []*rowliftv1.Chunk
	for {
		resp, err := stream.Recv()
		require.NoError(t, err)
		for _, item := range resp.GetItems() {
			if c := item.GetChunk(); c != nil {
				chunks = append(chunks, c)
				if c.GetTableDone() {
					return chunks
				}
			}
		}
	}
}
