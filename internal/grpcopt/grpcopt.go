// Package grpcopt holds the gRPC settings both ends of a rowlift connection must
// agree on: message size limits large enough for the biggest row MySQL can hold,
// keepalive pings the server permits (a server rejects clients that ping more
// often than its enforcement policy allows, with "too_many_pings"), and the
// OpenTelemetry instrumentation of every RPC.
package grpcopt

import (
	"time"

	"go.opentelemetry.io/contrib/instrumentation/google.golang.org/grpc/otelgrpc"
	"go.opentelemetry.io/contrib/instrumentation/google.golang.org/grpc/otelgrpc/filters"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/keepalive"
)

const (
	// MaxMessage fits one row of the largest max_allowed_packet (1 GiB) plus framing.
	MaxMessage = 1<<30 + 1<<20
	// window is the HTTP/2 flow-control window of a stream and of a
	// connection, fixed at twice the default packet (streamer
	// DefaultPacketBytes): gRPC's default starts at 64 KiB and grows with its
	// bandwidth estimate, which held the copy's first 4 MiB message back for
	// about 0.15 s of window updates on every new stream. A fixed window also
	// bounds what a stream buffers when its applier falls behind.
	window = 8 << 20
	// pingEvery is how often an idle client pings; the server permits half that.
	pingEvery = 30 * time.Second
)

// ServerOptions are the options every rowlift gRPC server uses; creds secure
// it (internal/grpctls), nil serves plaintext.
func ServerOptions(creds credentials.TransportCredentials) []grpc.ServerOption {
	opts := []grpc.ServerOption{
		grpc.MaxRecvMsgSize(MaxMessage),
		grpc.MaxSendMsgSize(MaxMessage),
		grpc.InitialWindowSize(window),
		grpc.InitialConnWindowSize(window),
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: pingEvery / 2, PermitWithoutStream: true}),
		grpc.KeepaliveParams(keepalive.ServerParameters{Time: pingEvery, Timeout: 10 * time.Second}),
		// A span and gRPC metrics per RPC through the global TracerProvider and
		// MeterProvider, no-op until a role installs one. Message events stay
		// off (otelgrpc's default): the copy stream is one RPC of many large
		// messages, and an event per message would grow its span without bound.
		// Health checks are left out: a kubelet probe every few seconds would
		// bury the traces worth reading.
		grpc.StatsHandler(otelgrpc.NewServerHandler(otelgrpc.WithFilter(filters.Not(filters.HealthCheck())))),
	}
	if creds != nil {
		opts = append(opts, grpc.Creds(creds))
	}
	return opts
}

// DialOptions are the options every rowlift gRPC client uses; creds secure
// the connection (internal/grpctls), nil dials plaintext.
func DialOptions(creds credentials.TransportCredentials) []grpc.DialOption {
	if creds == nil {
		creds = insecure.NewCredentials()
	}
	return []grpc.DialOption{
		grpc.WithTransportCredentials(creds),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(MaxMessage), grpc.MaxCallSendMsgSize(MaxMessage)),
		grpc.WithInitialWindowSize(window),
		grpc.WithInitialConnWindowSize(window),
		grpc.WithKeepaliveParams(keepalive.ClientParameters{Time: pingEvery, Timeout: 10 * time.Second, PermitWithoutStream: true}),
		grpc.WithStatsHandler(otelgrpc.NewClientHandler()), // as ServerOptions' handler
	}
}
