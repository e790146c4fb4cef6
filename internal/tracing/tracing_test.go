package tracing

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.uber.org/zap"

	"github.com/rowlift/rowlift/internal/tracing/tracingtest"
)

func TestExportProtocol(t *testing.T) {
	const (
		endpoint       = "OTEL_EXPORTER_OTLP_ENDPOINT"
		tracesEndpoint = "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"
		protocol       = "OTEL_EXPORTER_OTLP_PROTOCOL"
		tracesProtocol = "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL"
		exporter       = "OTEL_TRACES_EXPORTER"
		disabled       = "OTEL_SDK_DISABLED"
	)
	for _, tc := range []struct {
		name string
		env  map[string]string
		want string
		err  string
	}{
		{name: "nothing set: off", env: nil, want: ""},
		{name: "blank endpoint: off", env: map[string]string{endpoint: "  "}, want: ""},
		{name: "endpoint: grpc", env: map[string]string{endpoint: "http://collector:4317"}, want: protocolGRPC},
		{name: "traces endpoint alone: grpc", env: map[string]string{tracesEndpoint: "http://collector:4317"}, want: protocolGRPC},
		{name: "explicit otlp exporter without endpoint: the default endpoint", env: map[string]string{exporter: "otlp"}, want: protocolGRPC},
		{name: "exporter none wins over an endpoint", env: map[string]string{endpoint: "http://c:4317", exporter: "none"}, want: ""},
		{name: "SDK disabled wins over an endpoint", env: map[string]string{endpoint: "http://c:4317", disabled: "TRUE"}, want: ""},
		{name: "SDK disabled false: on", env: map[string]string{endpoint: "http://c:4317", disabled: "false"}, want: protocolGRPC},
		{name: "unknown exporter", env: map[string]string{endpoint: "http://c:4317", exporter: "zipkin"},
			err: `OTEL_TRACES_EXPORTER="zipkin": rowlift exports traces only with otlp; set it to otlp or none, or unset it`},
		{name: "unknown exporter without endpoint is still an error", env: map[string]string{exporter: "jaeger"},
			err: `OTEL_TRACES_EXPORTER="jaeger"`},
		{name: "http/protobuf", env: map[string]string{endpoint: "http://c:4318", protocol: "http/protobuf"}, want: protocolHTTP},
		{name: "grpc spelled out", env: map[string]string{endpoint: "http://c:4317", protocol: "grpc"}, want: protocolGRPC},
		{name: "traces protocol wins", env: map[string]string{endpoint: "http://c:4318", protocol: "grpc", tracesProtocol: "http/protobuf"}, want: protocolHTTP},
		{name: "http/json is refused, naming the variable", env: map[string]string{endpoint: "http://c:4318", protocol: "http/json"},
			err: `OTEL_EXPORTER_OTLP_PROTOCOL="http/json": rowlift exports OTLP traces over grpc or http/protobuf; set one of them, or unset it for grpc`},
		{name: "a bad traces protocol names its own variable", env: map[string]string{endpoint: "http://c:4318", tracesProtocol: "udp"},
			err: `OTEL_EXPORTER_OTLP_TRACES_PROTOCOL="udp"`},
		{name: "a bad protocol with tracing off is not looked at", env: map[string]string{protocol: "udp"}, want: ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := exportProtocol(func(k string) string { return tc.env[k] })
			if tc.err != "" {
				require.ErrorContains(t, err, tc.err)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tc.want, got)
		})
	}
}

// TestStartWithoutEndpointInstallsNothing: with no OTLP environment the
// global provider stays the no-op one, and stream items carry nothing.
func TestStartWithoutEndpointInstallsNothing(t *testing.T) {
	for _, k := range []string{"OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_TRACES_EXPORTER", "OTEL_SDK_DISABLED"} {
		t.Setenv(k, "")
	}
	before := otel.GetTracerProvider()
	shutdown, err := Start(context.Background(), "streamer", zap.NewNop())
	require.NoError(t, err)
	require.NoError(t, shutdown(context.Background()))
	require.Equal(t, before, otel.GetTracerProvider())
	ctx, span := otel.Tracer("test").Start(context.Background(), "chunk")
	defer span.End()
	require.False(t, span.IsRecording())
	require.Nil(t, Inject(ctx))
}

func TestStartRefusesBadEnvironment(t *testing.T) {
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:4317")
	t.Setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "http/json")
	_, err := Start(context.Background(), "applier", zap.NewNop())
	require.ErrorContains(t, err, `OTEL_EXPORTER_OTLP_PROTOCOL="http/json"`)
}

// TestInjectExtract: a sampled span's context survives the trip through a
// stream item's map, and a span started from it is its child; an unsampled
// one sends nothing.
func TestInjectExtract(t *testing.T) {
	prop := otel.GetTextMapPropagator()
	otel.SetTextMapPropagator(propagation.TraceContext{})
	t.Cleanup(func() { otel.SetTextMapPropagator(prop) })
	spans := tracetest.NewSpanRecorder()
	sampled := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(spans))
	ctx, parent := sampled.Tracer("streamer").Start(context.Background(), "chunk")
	carried := Inject(ctx)
	require.Contains(t, carried, "traceparent")
	_, child := sampled.Tracer("applier").Start(Extract(context.Background(), carried), "apply")
	child.End()
	parent.End()
	ended := spans.Ended()
	require.Len(t, ended, 2)
	require.Equal(t, ended[1].SpanContext().TraceID(), ended[0].SpanContext().TraceID())
	require.Equal(t, ended[1].SpanContext().SpanID(), ended[0].Parent().SpanID())
	require.True(t, ended[0].Parent().IsRemote())

	never := sdktrace.NewTracerProvider(sdktrace.WithSampler(sdktrace.NeverSample()))
	ctx, unsampled := never.Tracer("streamer").Start(context.Background(), "chunk")
	defer unsampled.End()
	require.Nil(t, Inject(ctx))
	require.Equal(t, context.Background(), Extract(context.Background(), nil))
}

// TestStartExports: with an endpoint, Start exports the role's spans over the
// chosen OTLP protocol, named by OTEL_SERVICE_NAME or rowlift-<role>, with
// OTEL_RESOURCE_ATTRIBUTES, sampled by OTEL_TRACES_SAMPLER, and flushes them
// at shutdown; a sampled span's context is carried (W3C propagator).
func TestStartExports(t *testing.T) {
	otlp := tracingtest.Start(t)
	for _, tc := range []struct {
		name    string
		env     map[string]string
		service string
		sampled bool
	}{
		{name: "grpc, default service name", service: "rowlift-applier", sampled: true,
			env: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://" + otlp.GRPCAddr}},
		{name: "http/protobuf, named service, resource attributes", service: "mover", sampled: true,
			env: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://" + otlp.HTTPAddr, "OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf",
				"OTEL_SERVICE_NAME": "mover", "OTEL_RESOURCE_ATTRIBUTES": "deployment.environment=staging"}},
		{name: "sampler off", service: "rowlift-applier",
			env: map[string]string{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://" + otlp.GRPCAddr, "OTEL_TRACES_SAMPLER": "always_off"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			provider, prop := otel.GetTracerProvider(), otel.GetTextMapPropagator()
			t.Cleanup(func() {
				otel.SetTracerProvider(provider)
				otel.SetTextMapPropagator(prop)
			})
			for k, v := range tc.env {
				t.Setenv(k, v)
			}
			shutdown, err := Start(context.Background(), "applier", zap.NewNop())
			require.NoError(t, err)
			ctx, span := otel.Tracer("test").Start(context.Background(), tc.name)
			carried := Inject(ctx)
			span.End()
			require.NoError(t, shutdown(context.Background()))

			got := otlp.Named(tc.service, tc.name)
			if !tc.sampled {
				require.Empty(t, got)
				require.Nil(t, carried)
				return
			}
			require.Len(t, got, 1)
			require.Contains(t, carried, "traceparent")
			if env := tc.env["OTEL_RESOURCE_ATTRIBUTES"]; env != "" {
				require.Equal(t, "staging", tracingtest.Attr(got[0].Resource, "deployment.environment").GetStringValue())
			}
		})
	}
}
