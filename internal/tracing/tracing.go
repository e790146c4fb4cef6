// Package tracing sets up OpenTelemetry traces for a rowlift role from the
// standard OTEL_* environment variables, and carries a span's context inside
// stream items, where the one long-lived stream RPC cannot parent them.
//
// With no OTLP endpoint in the environment nothing is installed: the global
// TracerProvider stays the no-op one, spans cost a check, and stream items
// carry no trace context.
package tracing

import (
	"context"
	"fmt"
	"os"
	"strings"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"
	"go.uber.org/zap"
)

// Span attribute keys of rowlift's own spans. Values are names and counts,
// never row or key values.
const (
	Workflow = attribute.Key("rowlift.workflow")
	// Source and Target are the workflow's names of the servers (the applier
	// knows them); SourceAddress is the source's host:port, which is all the
	// streamer knows of it.
	Source        = attribute.Key("rowlift.source")
	SourceAddress = attribute.Key("rowlift.source_address")
	Target        = attribute.Key("rowlift.target")
	Table         = attribute.Key("rowlift.table")
	Rows          = attribute.Key("rowlift.rows")
	Bytes         = attribute.Key("rowlift.bytes")
	// Verify marks a verify's chunk; Transactions counts a replay group's.
	Verify       = attribute.Key("rowlift.verify")
	Transactions = attribute.Key("rowlift.transactions")
)

// Protocols an OTLP trace exporter can speak here (OTEL_EXPORTER_OTLP_PROTOCOL).
const (
	protocolGRPC = "grpc"
	protocolHTTP = "http/protobuf"
)

// exportProtocol decides from the environment (getenv) whether spans are
// exported and with which OTLP protocol; "" means tracing stays off. It is
// on when an OTLP endpoint is set or OTEL_TRACES_EXPORTER asks for otlp, and
// off when OTEL_SDK_DISABLED is true or OTEL_TRACES_EXPORTER is none.
func exportProtocol(getenv func(string) string) (string, error) {
	if strings.EqualFold(strings.TrimSpace(getenv("OTEL_SDK_DISABLED")), "true") {
		return "", nil
	}
	exporter := strings.TrimSpace(getenv("OTEL_TRACES_EXPORTER"))
	switch exporter {
	case "none":
		return "", nil
	case "", "otlp":
	default:
		return "", fmt.Errorf("OTEL_TRACES_EXPORTER=%q: rowlift exports traces only with otlp; set it to otlp or none, or unset it", exporter)
	}
	noEndpoint := strings.TrimSpace(getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")) == "" &&
		strings.TrimSpace(getenv("OTEL_EXPORTER_OTLP_ENDPOINT")) == ""
	if exporter == "" && noEndpoint {
		return "", nil
	}
	name := "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL"
	protocol := strings.TrimSpace(getenv(name))
	if protocol == "" {
		name = "OTEL_EXPORTER_OTLP_PROTOCOL"
		protocol = strings.TrimSpace(getenv(name))
	}
	switch protocol {
	case "", protocolGRPC:
		return protocolGRPC, nil
	case protocolHTTP:
		return protocolHTTP, nil
	}
	return "", fmt.Errorf("%s=%q: rowlift exports OTLP traces over %s or %s; set one of them, or unset it for %s",
		name, protocol, protocolGRPC, protocolHTTP, protocolGRPC)
}

// Start exports the role's spans with OTLP when the environment asks for it
// (see exportProtocol): it installs the global TracerProvider, with the
// resource of OTEL_RESOURCE_ATTRIBUTES and OTEL_SERVICE_NAME (default
// rowlift-<role>), the sampler of OTEL_TRACES_SAMPLER, and the W3C
// trace-context propagator. Otherwise it installs nothing. The returned
// function flushes the spans not yet exported; call it before exit.
func Start(ctx context.Context, role string, log *zap.Logger) (shutdown func(context.Context) error, err error) {
	protocol, err := exportProtocol(os.Getenv)
	if err != nil || protocol == "" {
		return func(context.Context) error { return nil }, err
	}
	var exporter sdktrace.SpanExporter
	if protocol == protocolHTTP {
		exporter, err = otlptracehttp.New(ctx)
	} else {
		exporter, err = otlptracegrpc.New(ctx)
	}
	if err != nil {
		return nil, fmt.Errorf("OTLP trace exporter (check the OTEL_EXPORTER_OTLP_* variables): %w", err)
	}
	res, err := resource.New(ctx,
		resource.WithAttributes(semconv.ServiceName("rowlift-"+role)),
		resource.WithFromEnv(), // after the default: OTEL_SERVICE_NAME wins
		resource.WithTelemetrySDK())
	if err != nil {
		return nil, fmt.Errorf("trace resource (check OTEL_RESOURCE_ATTRIBUTES and OTEL_SERVICE_NAME): %w", err)
	}
	provider := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exporter), sdktrace.WithResource(res))
	otel.SetErrorHandler(otel.ErrorHandlerFunc(func(err error) {
		log.Warn("tracing: spans not exported; check OTEL_EXPORTER_OTLP_ENDPOINT and the collector", zap.Error(err))
	}))
	otel.SetTracerProvider(provider)
	otel.SetTextMapPropagator(propagation.TraceContext{})
	log.Info("tracing: exporting spans with OTLP", zap.String("protocol", protocol),
		zap.String("service", serviceName(res)))
	return provider.Shutdown, nil
}

// serviceName is the resource's service.name, for the startup log line.
func serviceName(res *resource.Resource) string {
	v, _ := res.Set().Value(semconv.ServiceNameKey)
	return v.AsString()
}

// Inject returns the trace context of ctx's span for a stream item, or nil
// when that span is not sampled: an untraced stream carries nothing.
func Inject(ctx context.Context) map[string]string {
	if !trace.SpanContextFromContext(ctx).IsSampled() {
		return nil
	}
	carrier := propagation.MapCarrier{}
	otel.GetTextMapPropagator().Inject(ctx, carrier)
	return carrier
}

// Extract returns ctx with the remote span context a stream item carries
// (Inject's), so a span started from it joins the sender's trace. Without
// one, ctx is returned as it is.
func Extract(ctx context.Context, carried map[string]string) context.Context {
	if len(carried) == 0 {
		return ctx
	}
	return otel.GetTextMapPropagator().Extract(ctx, propagation.MapCarrier(carried))
}

// End ends a span of rowlift's work with the rows and bytes it moved, and
// err if it failed. A span that is not recording costs only the check.
func End(span trace.Span, err error, rows, bytes int64) {
	if !span.IsRecording() {
		return
	}
	span.SetAttributes(Rows.Int64(rows), Bytes.Int64(bytes))
	if err != nil {
		span.RecordError(err)
		span.SetStatus(codes.Error, err.Error())
	}
	span.End()
}
