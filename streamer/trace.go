package streamer

import (
	"context"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/rowlift/rowlift/internal/tracing"
)

// tracer makes the streamer's spans; it is the no-op tracer until the
// process installs a TracerProvider (internal/tracing.Start).
var tracer = otel.Tracer("github.com/rowlift/rowlift/streamer")

// chunkSpan is the span of one chunk on the source side: from the chunk's
// request (its snapshot, the SELECT) until its last part is handed to the
// stream. Its context rides in every part (Chunk.trace_context) when
// sampled, so the applier's span of the chunk joins the trace.
type chunkSpan struct {
	span trace.Span
	// carried is what the parts carry: nil when the span is not sampled.
	carried     map[string]string
	rows, bytes int64
}

// startChunkSpan starts the span of a chunk of table; attrs name the stream
// (workflow, source). Each chunk starts a trace of its own, linked to the
// stream's RPC: a stream lasts for days, and one trace of all its chunks
// would grow without bound, sampled all or nothing.
func startChunkSpan(ctx context.Context, attrs []attribute.KeyValue, table string, verify bool) (context.Context, chunkSpan) {
	ctx, span := tracer.Start(ctx, "rowlift.streamer.chunk", trace.WithNewRoot(), trace.WithLinks(trace.LinkFromContext(ctx)))
	s := chunkSpan{span: span}
	if span.IsRecording() {
		span.SetAttributes(attrs...)
		span.SetAttributes(tracing.Table.String(table), tracing.Verify.Bool(verify))
		s.carried = tracing.Inject(ctx)
	}
	return ctx, s
}

// sent counts a part of the chunk handed to the stream.
func (s *chunkSpan) sent(rows int64, bytes int) {
	s.rows += rows
	s.bytes += int64(bytes)
}

// end ends the span with the chunk's rows and bytes, and err if it failed.
func (s *chunkSpan) end(err error) { tracing.End(s.span, err, s.rows, s.bytes) }
