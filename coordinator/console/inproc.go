package console

import (
	"context"
	"fmt"
	"net"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/test/bufconn"

	rowliftv1 "github.com/rowlift/rowlift/proto/rowlift/v1"
)

// inproc serves the Control service on an in-memory listener behind the
// coordinator's own interceptors, so a console call is authorized, logged and
// answered exactly as the same call from `rowlift workflow` is. Dialling the
// coordinator's real listener instead would present the coordinator's own
// client certificate, whose mapped identity would lend its role to every
// browser.
type inproc struct {
	gs     *grpc.Server
	conn   *grpc.ClientConn
	client rowliftv1.ControlClient
}

// startInproc serves control with opts (the coordinator's authz
// interceptors; none when the API is open) and dials it.
func startInproc(control rowliftv1.ControlServer, opts []grpc.ServerOption) (*inproc, error) {
	lis := bufconn.Listen(1 << 20)
	gs := grpc.NewServer(opts...)
	rowliftv1.RegisterControlServer(gs, control)
	go gs.Serve(lis) //nolint:errcheck // returns when Stop closes lis
	conn, err := grpc.NewClient("passthrough:///console",
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return lis.DialContext(ctx) }),
		grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		gs.Stop()
		return nil, fmt.Errorf("console: dial the in-process Control service: %w", err)
	}
	return &inproc{gs: gs, conn: conn, client: rowliftv1.NewControlClient(conn)}, nil
}

func (p *inproc) close() {
	p.conn.Close()
	p.gs.Stop()
}
