package metrics

import (
	"context"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
)

// SendStream records what a streamer sends on one stream. The streamer knows a
// stream by its workflow only (the request names neither source nor target),
// so the streams of a reshard's targets add up in one series per workflow.
type SendStream struct {
	in     *instruments
	add    []metric.AddOption
	tables map[string][]metric.AddOption
}

// NewSendStream starts recording a stream of workflow carrying tables; its label
// sets are built here, so recording a message allocates nothing, and its
// counters show from the start, at 0.
func NewSendStream(workflow string, tables []string) *SendStream {
	return std.newSendStream(workflow, tables)
}

func (in *instruments) newSendStream(workflow string, tables []string) *SendStream {
	wf := attribute.String("workflow", workflow)
	s := &SendStream{in: in, add: []metric.AddOption{metric.WithAttributeSet(attribute.NewSet(wf))}, tables: map[string][]metric.AddOption{}}
	ctx := context.Background()
	in.sentBytes.Add(ctx, 0, s.add...)
	for _, t := range tables {
		s.tables[t] = []metric.AddOption{metric.WithAttributeSet(attribute.NewSet(wf, attribute.String("table", t)))}
		in.chunksSent.Add(ctx, 0, s.tables[t]...)
	}
	return s
}

// Sent records a message of bytes sent.
func (s *SendStream) Sent(bytes int) {
	s.in.sentBytes.Add(context.Background(), int64(bytes), s.add...)
}

// ChunkSent records a copy chunk of table sent.
func (s *SendStream) ChunkSent(table string) {
	opts, ok := s.tables[table]
	if !ok {
		opts = s.add
	}
	s.in.chunksSent.Add(context.Background(), 1, opts...)
}
