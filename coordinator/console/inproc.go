package console

import (
	"context"
	"crypto/sha256"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"sync"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/test/bufconn"

	rowliftv1 "github.com/rowlift/rowlift/proto/rowlift/v1"
)

const (
	// maxPeers bounds the in-process connections kept for browsers' client
	// certificates; the least recently used one goes first.
	maxPeers = 32
	// pipeBytes is each in-process connection's buffer per direction.
	pipeBytes = 64 << 10
)

// inproc serves the Control service on in-memory listeners behind the
// coordinator's own interceptors, so a console call is authorized, logged and
// answered exactly as the same call from `rowlift workflow` is. Dialling the
// coordinator's real listener instead would present the coordinator's own
// client certificate, whose mapped identity would lend its role to every
// browser. A browser that presented a verified client certificate in its
// TLS handshake with the console gets a connection of its own, whose server
// side carries that handshake's state as its TLS peer (peerCreds): the
// interceptors read the certificate's names from it as they read the CLI's.
// Every other browser shares one connection with no peer identity. Only the
// console's own TLS handshake sets the state; nothing a browser sends can.
type inproc struct {
	gs   *grpc.Server
	anon *peerConn

	mu     sync.Mutex
	byCert map[[sha256.Size]byte]*peerConn
	clock  uint64
	closed bool
}

// peerConn is an in-process connection and the listener its server side
// came from.
type peerConn struct {
	lis    net.Listener
	conn   *grpc.ClientConn
	client rowliftv1.ControlClient
	// users counts calls in flight; lastUse orders the LRU; evicted
	// connections close when their last call ends.
	users   int
	lastUse uint64
	evicted bool
}

// startInproc serves control with opts (the coordinator's authz
// interceptors; none when the API is open) and dials it without a peer
// identity.
func startInproc(control rowliftv1.ControlServer, opts []grpc.ServerOption) (*inproc, error) {
	gs := grpc.NewServer(append([]grpc.ServerOption{grpc.Creds(peerCreds{insecure.NewCredentials()})}, opts...)...)
	rowliftv1.RegisterControlServer(gs, control)
	p := &inproc{gs: gs, byCert: map[[sha256.Size]byte]*peerConn{}}
	var err error
	if p.anon, err = p.dial(nil); err != nil {
		gs.Stop()
		return nil, err
	}
	return p, nil
}

// dial opens an in-process connection whose server side carries state (nil:
// no TLS peer).
func (p *inproc) dial(state *tls.ConnectionState) (*peerConn, error) {
	lis := &stateListener{Listener: bufconn.Listen(pipeBytes), state: state}
	go p.gs.Serve(lis) //nolint:errcheck // returns when the listener closes
	conn, err := grpc.NewClient("passthrough:///console",
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return lis.DialContext(ctx) }),
		grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		lis.Close()
		return nil, fmt.Errorf("console: dial the in-process Control service: %w", err)
	}
	return &peerConn{lis: lis, conn: conn, client: rowliftv1.NewControlClient(conn)}, nil
}

// client returns the Control client for a browser whose TLS state with the
// console is state (nil: plain HTTP), and release, to call once the call is
// done. The connection is the certificate's when the handshake verified one.
func (p *inproc) client(state *tls.ConnectionState) (rowliftv1.ControlClient, func(), error) {
	if state == nil || len(state.VerifiedChains) == 0 {
		return p.anon.client, func() {}, nil
	}
	key := sha256.Sum256(state.VerifiedChains[0][0].Raw)
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return nil, nil, errors.New("console: closed")
	}
	pc := p.byCert[key]
	if pc == nil {
		var err error
		if pc, err = p.dial(state); err != nil {
			return nil, nil, err
		}
		p.byCert[key] = pc
	}
	p.clock++
	pc.lastUse = p.clock
	pc.users++
	if len(p.byCert) > maxPeers {
		p.evictOldest()
	}
	return pc.client, func() { p.release(pc) }, nil
}

// evictOldest drops the least recently used certificate's connection, closing
// it now or, while a call uses it, when that call ends. Under p.mu.
func (p *inproc) evictOldest() {
	var oldest [sha256.Size]byte
	var found *peerConn
	for k, pc := range p.byCert {
		if found == nil || pc.lastUse < found.lastUse {
			oldest, found = k, pc
		}
	}
	delete(p.byCert, oldest)
	found.evicted = true
	if found.users == 0 {
		found.close()
	}
}

func (p *inproc) release(pc *peerConn) {
	p.mu.Lock()
	defer p.mu.Unlock()
	pc.users--
	if pc.evicted && pc.users == 0 {
		pc.close()
	}
}

// peers is how many certificates' connections are kept, for tests of the bound.
func (p *inproc) peers() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.byCert)
}

func (pc *peerConn) close() {
	pc.conn.Close()
	pc.lis.Close()
}

func (p *inproc) close() {
	p.mu.Lock()
	p.closed = true
	for k, pc := range p.byCert {
		delete(p.byCert, k)
		pc.close()
	}
	p.mu.Unlock()
	p.anon.close()
	p.gs.Stop()
}

// stateListener is an in-memory listener whose connections carry the TLS
// state of the browser they serve (nil: none).
type stateListener struct {
	*bufconn.Listener
	state *tls.ConnectionState
}

func (l *stateListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return &stateConn{Conn: c, state: l.state}, nil
}

// stateConn is the server side of an in-process connection.
type stateConn struct {
	net.Conn
	state *tls.ConnectionState
}

// peerCreds is the server side's transport credentials: a connection that
// carries a browser's TLS state presents it as a TLS handshake would
// (credentials.TLSInfo, which the authz interceptors read the certificate's
// names from); any other has no security. The client side is insecure: the
// bytes never leave the process.
type peerCreds struct {
	credentials.TransportCredentials
}

func (c peerCreds) ServerHandshake(conn net.Conn) (net.Conn, credentials.AuthInfo, error) {
	if sc, ok := conn.(*stateConn); ok && sc.state != nil {
		return conn, credentials.TLSInfo{State: *sc.state, CommonAuthInfo: credentials.CommonAuthInfo{SecurityLevel: credentials.PrivacyAndIntegrity}}, nil
	}
	return c.TransportCredentials.ServerHandshake(conn)
}

func (c peerCreds) Clone() credentials.TransportCredentials {
	return peerCreds{c.TransportCredentials.Clone()}
}
