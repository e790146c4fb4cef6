package benchkit

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	"google.golang.org/grpc"

	"github.com/rowlift/rowlift/internal/grpcopt"
	"github.com/rowlift/rowlift/internal/sandbox"
	rowliftv1 "github.com/rowlift/rowlift/proto/rowlift/v1"
)

// Cluster is the rowlift processes of a benchmark that moves one source to
// several targets through the Control API, so that the move and split
// benchmarks start them the same way.
type Cluster struct {
	StreamerAddr string
	Streamer     *Proc
	// Appliers are the targets' appliers, in the order of the targets.
	Appliers    []*Proc
	Coordinator *Proc
	Conn        *grpc.ClientConn
	Control     rowliftv1.ControlClient
}

// TargetName is the coordinator's name of the i-th target server: the move's
// first ("main"), then the split's shards.
func TargetName(i int) string {
	if i == 0 {
		return "main"
	}
	return fmt.Sprintf("shard%d", i-1)
}

// StartCluster starts the streamer of sourceDSN, an applier per target (each
// logging in a directory of its own under logDir) and a coordinator that
// knows every target by TargetName, records them in procs and connects to
// the coordinator. Close the returned cluster's Conn; procs stops the rest.
func StartCluster(ctx context.Context, bin, logDir, sourceDSN string, targets []*sandbox.Server, procs *Procs) (*Cluster, error) {
	return StartClusterArgs(ctx, bin, logDir, sourceDSN, targets, procs, nil)
}

// StartClusterArgs is StartCluster with more flags for some processes, by
// their name in procs ("streamer", "applier of main", ...), such as
// --debug-listen for a benchmark that profiles them.
func StartClusterArgs(ctx context.Context, bin, logDir, sourceDSN string, targets []*sandbox.Server, procs *Procs, extra map[string][]string) (*Cluster, error) {
	addrs, err := FreeAddrs(2)
	if err != nil {
		return nil, err
	}
	c := &Cluster{StreamerAddr: addrs[0]}
	if c.Streamer, err = StartStreamer(ctx, bin, logDir, c.StreamerAddr, sourceDSN, extra["streamer"]...); err != nil {
		return nil, err
	}
	procs.Add("streamer", c.Streamer)
	known := map[string]string{}
	for i, srv := range targets {
		name := TargetName(i)
		dir := filepath.Join(logDir, name)
		if err := os.Mkdir(dir, 0o755); err != nil {
			return nil, fmt.Errorf("log dir: %w", err)
		}
		ap, err := StartProc(bin, dir, "applier", append([]string{"--target-dsn", srv.DSN(""), "--poll-interval", PollInterval.String()}, extra["applier of "+name]...)...)
		if err != nil {
			return nil, fmt.Errorf("applier of %s: %w", name, err)
		}
		c.Appliers = append(c.Appliers, ap)
		procs.Add("applier of "+name, ap)
		known[name] = srv.DSN("")
	}
	if c.Coordinator, err = StartCoordinator(ctx, bin, logDir, addrs[1], known); err != nil {
		return nil, err
	}
	procs.Add("coordinator", c.Coordinator)
	if c.Conn, err = grpc.NewClient(addrs[1], grpcopt.DialOptions(nil)...); err != nil {
		return nil, fmt.Errorf("coordinator client: %w", err)
	}
	c.Control = rowliftv1.NewControlClient(c.Conn)
	return c, nil
}

// Teardown undoes a cluster benchmark's setup in reverse, whatever part of it
// was done: the Control API connection (c may be nil), every rowlift process,
// the servers and the temporary directory with the binary and the logs.
func Teardown(c *Cluster, procs *Procs, servers *Servers, tmp string, progress func(string, ...any)) {
	if c != nil {
		c.Conn.Close()
	}
	if err := procs.Stop(); err != nil {
		progress("%v", err)
	}
	servers.ClosePools()
	servers.Remove(progress)
	os.RemoveAll(tmp)
}
