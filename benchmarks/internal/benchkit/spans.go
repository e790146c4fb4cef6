package benchkit

import (
	"context"
	"fmt"
	"net"
	"sync"
	"time"

	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	"google.golang.org/grpc"
)

// SpanReceiver is an OTLP/gRPC trace collector in the benchmark's process:
// a benchmark points a rowlift role at it (Env) to time what the role does
// inside, from the spans the role already makes, without changing rowlift.
type SpanReceiver struct {
	coltracepb.UnimplementedTraceServiceServer
	addr   string
	server *grpc.Server
	mu     sync.Mutex
	// durations are the received spans' durations by span name.
	durations map[string][]time.Duration
}

// StartSpanReceiver listens for OTLP/gRPC on a loopback port until Stop.
func StartSpanReceiver() (*SpanReceiver, error) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("span receiver: %w", err)
	}
	r := &SpanReceiver{addr: lis.Addr().String(), server: grpc.NewServer(), durations: map[string][]time.Duration{}}
	coltracepb.RegisterTraceServiceServer(r.server, r)
	go r.server.Serve(lis) //nolint:errcheck // ends with Stop
	return r, nil
}

// Env is the OTel environment of a process that exports its spans to the
// receiver, every 50 ms rather than every 5 s so that they arrive while the
// benchmark runs.
func (r *SpanReceiver) Env() []string {
	return []string{"OTEL_EXPORTER_OTLP_ENDPOINT=http://" + r.addr, "OTEL_EXPORTER_OTLP_PROTOCOL=grpc", "OTEL_BSP_SCHEDULE_DELAY=50"}
}

// Export receives spans over OTLP/gRPC and keeps only their names and durations.
func (r *SpanReceiver) Export(_ context.Context, req *coltracepb.ExportTraceServiceRequest) (*coltracepb.ExportTraceServiceResponse, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, rs := range req.GetResourceSpans() {
		for _, ss := range rs.GetScopeSpans() {
			for _, s := range ss.GetSpans() {
				d := time.Duration(s.GetEndTimeUnixNano() - s.GetStartTimeUnixNano())
				r.durations[s.GetName()] = append(r.durations[s.GetName()], d)
			}
		}
	}
	return &coltracepb.ExportTraceServiceResponse{}, nil
}

// Durations are the durations of the spans called name received so far, in
// the order they arrived.
func (r *SpanReceiver) Durations(name string) []time.Duration {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]time.Duration(nil), r.durations[name]...)
}

// Stop stops listening.
func (r *SpanReceiver) Stop() { r.server.Stop() }
