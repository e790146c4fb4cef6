// Package probe serves a role's gRPC health (grpc.health.v1) on a plaintext port
// of its own, for kubelet's gRPC probes: they cannot present a client
// certificate, while the role's main port may require mTLS.
//
// Two service names answer on every role. Liveness ("", the server's overall
// status) is SERVING from start until shutdown begins: a restart would not fix
// what a live process reports as not ready. Readiness ("readiness") is SERVING
// once the role does its job (the role decides when), and both turn NOT_SERVING
// when shutdown begins, so the pod leaves its Service before it stops answering.
package probe

import (
	"context"
	"fmt"
	"net"

	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

// Service names a probe asks for; the manifests' probes name the same.
const (
	Liveness  = ""
	Readiness = "readiness"
)

// Server is a role's health state, answered on its own port and optionally on
// the role's main gRPC server too.
type Server struct {
	health *health.Server
	grpc   *grpc.Server
	// mirrors are services that report readiness too (the coordinator's
	// Control service, which clients already check on its main port).
	mirrors []string
}

// Start serves health on addr (nothing when addr is empty) until Close, live
// and not yet ready; when ctx ends every service turns NOT_SERVING. mirrors
// are service names that follow readiness.
func Start(ctx context.Context, addr string, log *zap.Logger, mirrors ...string) (*Server, error) {
	s := &Server{health: health.NewServer(), mirrors: mirrors}
	s.SetReady(false)
	context.AfterFunc(ctx, s.health.Shutdown)
	if addr == "" {
		return s, nil
	}
	lis, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("--health-listen %s: %w", addr, err)
	}
	s.grpc = grpc.NewServer()
	healthpb.RegisterHealthServer(s.grpc, s.health)
	log.Info("health server listening", zap.String("addr", lis.Addr().String()))
	go func() {
		if err := s.grpc.Serve(lis); err != nil {
			log.Error("health server stopped", zap.Error(err))
		}
	}()
	return s, nil
}

// Register answers health on a role's main gRPC server as well.
func (s *Server) Register(gs *grpc.Server) { healthpb.RegisterHealthServer(gs, s.health) }

// SetReady sets readiness (and the mirrors); after shutdown began it changes nothing.
func (s *Server) SetReady(ready bool) {
	st := healthpb.HealthCheckResponse_NOT_SERVING
	if ready {
		st = healthpb.HealthCheckResponse_SERVING
	}
	for _, name := range append([]string{Readiness}, s.mirrors...) {
		s.health.SetServingStatus(name, st)
	}
}

// Close stops the health port.
func (s *Server) Close() {
	s.health.Shutdown()
	if s.grpc != nil {
		s.grpc.Stop()
	}
}
