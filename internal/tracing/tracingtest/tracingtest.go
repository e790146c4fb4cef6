// Package tracingtest runs an OTLP trace collector in the test's process, so
// tests check the spans rowlift exports as a real collector would get them,
// over OTLP/gRPC or OTLP/HTTP.
package tracingtest

import (
	"context"
	"io"
	"net"
	"net/http"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"
)

// Receiver collects the spans exported to it until the test ends.
type Receiver struct {
	coltracepb.UnimplementedTraceServiceServer
	// GRPCAddr and HTTPAddr are where it listens for OTLP/gRPC and for
	// OTLP/HTTP (protobuf), host:port.
	GRPCAddr, HTTPAddr string
	mu                 sync.Mutex
	spans              []Span
}

// Span is one received span with the resource of the process that made it.
type Span struct {
	Resource []*commonpb.KeyValue
	*tracepb.Span
}

// Service is the span's service.name.
func (s Span) Service() string { return Attr(s.Resource, "service.name").GetStringValue() }

// Start starts a receiver on loopback ports.
func Start(t testing.TB) *Receiver {
	t.Helper()
	r := &Receiver{}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	r.GRPCAddr = lis.Addr().String()
	gs := grpc.NewServer()
	coltracepb.RegisterTraceServiceServer(gs, r)
	go gs.Serve(lis) //nolint:errcheck // ends with Stop
	t.Cleanup(gs.Stop)

	hlis, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	r.HTTPAddr = hlis.Addr().String()
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/traces", r.serveHTTP)
	hs := &http.Server{Handler: mux}
	go hs.Serve(hlis) //nolint:errcheck // ends with Close
	t.Cleanup(func() { hs.Close() })
	return r
}

// Env is the OTel environment that points a process at the receiver over
// OTLP/gRPC, with spans exported every 50 ms rather than every 5 s.
func (r *Receiver) Env() []string {
	return []string{"OTEL_EXPORTER_OTLP_ENDPOINT=http://" + r.GRPCAddr, "OTEL_BSP_SCHEDULE_DELAY=50"}
}

// Export receives spans over OTLP/gRPC.
func (r *Receiver) Export(_ context.Context, req *coltracepb.ExportTraceServiceRequest) (*coltracepb.ExportTraceServiceResponse, error) {
	r.add(req)
	return &coltracepb.ExportTraceServiceResponse{}, nil
}

// serveHTTP receives spans over OTLP/HTTP with protobuf bodies.
func (r *Receiver) serveHTTP(w http.ResponseWriter, req *http.Request) {
	body, err := io.ReadAll(req.Body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	var export coltracepb.ExportTraceServiceRequest
	if err := proto.Unmarshal(body, &export); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	r.add(&export)
	out, _ := proto.Marshal(&coltracepb.ExportTraceServiceResponse{})
	w.Header().Set("Content-Type", "application/x-protobuf")
	w.Write(out) //nolint:errcheck // the exporter retries what it does not get
}

func (r *Receiver) add(req *coltracepb.ExportTraceServiceRequest) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, rs := range req.GetResourceSpans() {
		for _, ss := range rs.GetScopeSpans() {
			for _, s := range ss.GetSpans() {
				r.spans = append(r.spans, Span{Resource: rs.GetResource().GetAttributes(), Span: s})
			}
		}
	}
}

// Named returns the received spans of service with the given name.
func (r *Receiver) Named(service, name string) []Span {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []Span
	for _, s := range r.spans {
		if s.Service() == service && s.GetName() == name {
			out = append(out, s)
		}
	}
	return out
}

// Attr is the value of key in attrs, nil when it is not there.
func Attr(attrs []*commonpb.KeyValue, key string) *commonpb.AnyValue {
	for _, kv := range attrs {
		if kv.GetKey() == key {
			return kv.GetValue()
		}
	}
	return nil
}
