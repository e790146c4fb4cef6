package applier

import (
	"context"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/trace"

	"github.com/rowlift/rowlift/internal/tracing"
)

// tracer makes the applier's spans; it is the no-op tracer until the process
// installs a TracerProvider (internal/tracing.Start).
var tracer = otel.Tracer("github.com/rowlift/rowlift/applier")

// startSpan starts a span of the stream's work named name, a child of the
// span context carried by the item it applies (a chunk's streamer span; nil:
// none), with the stream's attributes and the table's ("": several).
func (p *player) startSpan(ctx context.Context, name string, carried map[string]string, table string) trace.Span {
	_, span := tracer.Start(tracing.Extract(ctx, carried), name)
	if span.IsRecording() {
		span.SetAttributes(p.spanAttrs...)
		if table != "" {
			span.SetAttributes(tracing.Table.String(table))
		}
	}
	return span
}
