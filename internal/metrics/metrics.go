// Package metrics exports rowlift's OpenTelemetry metrics for Prometheus. Serve
// builds the MeterProvider every role sets as the global one, so that the gRPC
// instrumentation (otelgrpc) and rowlift's own instruments (instruments.go) land
// in one registry, next to the Go runtime and process metrics, and serves it on
// /metrics. Catalog lists the Prometheus names of rowlift's own metrics.
package metrics

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"runtime"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/prometheus/otlptranslator"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	otelprom "go.opentelemetry.io/otel/exporters/prometheus"
	"go.opentelemetry.io/otel/metric"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.uber.org/zap"
)

// Path is where the metrics are served.
const Path = "/metrics"

// newProvider builds a MeterProvider whose metrics a Prometheus scrape of the
// returned handler shows. The Go runtime and process metrics come from
// Prometheus' own collectors on the same registry: they keep the go_* and
// process_* names every Go dashboard and alert already uses, and the process
// collector adds CPU seconds, resident memory and open files, which the
// OpenTelemetry runtime instrumentation does not report.
func newProvider(info BuildInfo) (*sdkmetric.MeterProvider, http.Handler, error) {
	reg := prometheus.NewRegistry()
	if err := reg.Register(collectors.NewGoCollector()); err != nil {
		return nil, nil, fmt.Errorf("register Go runtime metrics: %w", err)
	}
	if err := reg.Register(collectors.NewProcessCollector(collectors.ProcessCollectorOpts{})); err != nil {
		return nil, nil, fmt.Errorf("register process metrics: %w", err)
	}
	// The strategy is the exporter's default, spelled out so that the scraped
	// names (suffixes _total, _seconds, _bytes), which dashboards and Catalog
	// depend on, do not change with a new default.
	exp, err := otelprom.New(otelprom.WithRegisterer(reg), otelprom.WithTranslationStrategy(otlptranslator.UnderscoreEscapingWithSuffixes))
	if err != nil {
		return nil, nil, fmt.Errorf("build the Prometheus exporter: %w", err)
	}
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(exp))
	if err := registerBuildInfo(mp.Meter(scope), info); err != nil {
		_ = mp.Shutdown(context.Background())
		return nil, nil, err
	}
	return mp, promhttp.HandlerFor(reg, promhttp.HandlerOpts{}), nil
}

// BuildInfo is what rowlift_build_info says of the running binary, from a
// role's first scrape on (Prometheus's convention for info metrics): an
// absent() alert, a version panel or a check that a role runs the intended
// build has a series to read before any workflow moves.
type BuildInfo struct {
	// Role is the process's role: streamer, applier or coordinator.
	Role string
	// Version is the release version (rowlift version); Revision the VCS
	// commit the binary was built from ("" when unknown).
	Version, Revision string
}

// registerBuildInfo adds rowlift_build_info{version,revision,go_version,role} = 1.
func registerBuildInfo(m metric.Meter, info BuildInfo) error {
	attrs := metric.WithAttributes(attribute.String("version", info.Version), attribute.String("revision", info.Revision),
		attribute.String("go_version", runtime.Version()), attribute.String("role", info.Role))
	_, err := m.Int64ObservableGauge("rowlift.build.info",
		metric.WithDescription("1, labelled with the version, VCS revision and Go version of the binary and the role it runs."),
		metric.WithInt64Callback(func(_ context.Context, o metric.Int64Observer) error {
			o.Observe(1, attrs)
			return nil
		}))
	if err != nil {
		return fmt.Errorf("register rowlift_build_info: %w", err)
	}
	return nil
}

// Serve makes metrics recorded through the global MeterProvider (rowlift's
// instruments and otelgrpc's), and info as rowlift_build_info, visible to
// Prometheus at http://addr/metrics until ctx ends. It returns once addr is
// bound, with an error if it cannot be; an empty addr turns metrics off, and
// recording them costs next to nothing.
func Serve(ctx context.Context, addr string, info BuildInfo, log *zap.Logger) error {
	if addr == "" {
		return nil
	}
	lis, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("--metrics-listen %s: %w (pick a free address, or leave it empty to turn metrics off)", addr, err)
	}
	mp, handler, err := newProvider(info)
	if err != nil {
		lis.Close()
		return err
	}
	otel.SetMeterProvider(mp)
	mux := http.NewServeMux()
	mux.Handle(Path, handler)
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	log.Info("serving metrics", zap.String("addr", lis.Addr().String()), zap.String("path", Path))
	go func() {
		if err := srv.Serve(lis); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error("metrics server stopped", zap.Error(err))
		}
	}()
	context.AfterFunc(ctx, func() {
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx) // a scrape cut short at exit is no loss
		_ = mp.Shutdown(sctx)
	})
	return nil
}
