// Package streamer is the source side of rowlift. It serves the Stream RPC: for the
// tables a workflow asks for it runs continuous PK-ordered LIMITed chunks, each at
// its fence, and sends them on one long-lived gRPC stream to the applier.
package streamer

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/go-sql-driver/mysql"
	"go.opentelemetry.io/otel/attribute"
	"go.uber.org/zap"
	"golang.org/x/sync/errgroup"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/rowlift/rowlift/internal/dbconn"
	"github.com/rowlift/rowlift/internal/ddlscope"
	"github.com/rowlift/rowlift/internal/frozen"
	"github.com/rowlift/rowlift/internal/grants"
	"github.com/rowlift/rowlift/internal/gtid"
	"github.com/rowlift/rowlift/internal/metrics"
	"github.com/rowlift/rowlift/internal/rowcodec"
	"github.com/rowlift/rowlift/internal/schema"
	"github.com/rowlift/rowlift/internal/throttle"
	"github.com/rowlift/rowlift/internal/tracing"
	"github.com/rowlift/rowlift/internal/verify"
	rowliftv1 "github.com/rowlift/rowlift/proto/rowlift/v1"
)

// Defaults for zero StreamOptions, chosen on benchmarks/copy: large chunks and
// packets mean few target transactions, which is most of what a copy costs the
// target beyond the rows themselves. DefaultChunkRows bounds a chunk of narrow
// rows; chunks of wider rows are sized by DefaultChunkBytes.
const (
	DefaultChunkRows      = 100000
	DefaultPacketBytes    = 4 << 20
	DefaultParallelTables = 4
	DefaultHeartbeatMs    = 1000
	// sendQueue is how many items wait for the gRPC sender; it bounds memory to
	// about sendQueue packets per stream (32 MiB at the default packet size):
	// a chunk's part holds at most a packet and one row, a transaction is
	// held whole.
	sendQueue = 8
	// maxQueuedTxBytes bounds the binlog transactions the merger holds while
	// they wait for a chunk of their table (its fence, its rows) or for a
	// snapshot that shows them visible: past it the reader waits, unless a
	// chunk waits for the reader (merger.holdsReader).
	maxQueuedTxBytes = 64 << 20
	// readQueue is how many transactions the reader hands over ahead of the
	// merge loop.
	readQueue = 16
)

// Config configures a Server.
type Config struct {
	// SourceDSN is the go-sql-driver DSN of the source server.
	SourceDSN string
	Logger    *zap.Logger
}

// Server serves the Streamer service for one source server.
type Server struct {
	rowliftv1.UnimplementedStreamerServer
	db  *sql.DB
	cfg *mysql.Config
	log *zap.Logger
	// targets holds the appliers' reasons to pause copies (the Throttle RPC).
	targets *targetThrottles
	// locks holds the LOCK freezes of cutovers (the Freeze RPC).
	locks *tableLocks
	// lockWait bounds how long a freeze waits for its tables (maxLockWait).
	lockWait time.Duration
	// chunks shares chunk reads among the streams of a workflow, so a reshard
	// reads each source row about once whatever the number of targets.
	chunks *chunkCache
}

// New opens the source pool; it does not connect until a stream needs it, so a
// streamer can start before its source is up.
func New(cfg Config) (*Server, error) {
	db, mcfg, err := dbconn.Open(cfg.SourceDSN, dbconn.Source)
	if err != nil {
		return nil, fmt.Errorf("source: %w", err)
	}
	log := cfg.Logger
	if log == nil {
		log = zap.NewNop()
	}
	return &Server{db: db, cfg: mcfg, log: log.With(zap.String("source", dbconn.Redacted(mcfg))), targets: newTargetThrottles(),
		locks: newTableLocks(), lockWait: maxLockWait, chunks: newChunkCache()}, nil
}

// Close releases the freeze locks and closes the source pool.
func (s *Server) Close() error {
	s.releaseLocks()
	return s.db.Close()
}

// Stream serves one (workflow, source) stream until the applier cancels it.
func (s *Server) Stream(req *rowliftv1.StreamRequest, stream grpc.ServerStreamingServer[rowliftv1.StreamResponse]) error {
	ctx := stream.Context()
	log := s.log.With(zap.String("workflow", req.GetWorkflow()))
	if kr, sharded, err := keyRange(req.GetKeyRange()); err == nil && sharded {
		// It tells apart the streams of one workflow to several target shards.
		log = log.With(zap.Stringer("key_range", kr))
	}
	err := s.stream(ctx, req, stream, log)
	if errors.Is(err, errEndsAtDDL) {
		log.Info("stream ended after a schema change of its tables; the applier reopens it", zap.Error(err))
		return status.Error(codes.Aborted, err.Error())
	}
	if err != nil && ctx.Err() == nil {
		log.Warn("stream ended", zap.Error(err))
	}
	return err
}

// errEndsAtDDL ends a stream once it has sent a schema change of its tables
// (not a cutover's freeze): the applier stops at it or goes past it, then
// opens a new stream after it, whose plans and fields describe the tables as
// they are then.
var errEndsAtDDL = errors.New("the stream ends after a schema change of its tables")

// Validate runs the checks a stream starts with and describes the tables, so a
// workflow is refused at creation rather than when its stream first opens; it
// also tries the source user's grants.
func (s *Server) Validate(ctx context.Context, req *rowliftv1.StreamRequest) (*rowliftv1.ValidateResponse, error) {
	opts, plans, flavor, err := s.prepare(ctx, req, true)
	if err == nil {
		err = s.checkBinlogGrant(ctx, flavor)
	}
	if err == nil {
		err = checkThrottleReads(ctx, s.db, opts)
	}
	if err != nil {
		s.log.Info("workflow refused", zap.String("workflow", req.GetWorkflow()), zap.Error(err))
		return nil, err
	}
	resp := &rowliftv1.ValidateResponse{Flavor: string(flavor)}
	for _, p := range plans {
		resp.Tables = append(resp.Tables, p.fields)
		if p.filter == nil {
			continue
		}
		warnings, err := perShardKeys(ctx, s.db, p)
		if err != nil {
			return nil, status.Errorf(codes.Unavailable, "read unique keys of %s: %v", p.table.Name, err)
		}
		resp.Warnings = append(resp.Warnings, warnings...)
	}
	return resp, nil
}

// checkThrottleReads reads the source's throttle metrics once, so a lag query
// that fails or a metric the user may not read is refused at creation instead
// of pausing the copy for good.
func checkThrottleReads(ctx context.Context, db *sql.DB, opts *rowliftv1.StreamOptions) error {
	if !throttle.Enabled(opts.GetThrottle()) {
		return nil
	}
	for _, r := range throttle.NewReader(db, "source", opts.GetThrottle()).Read(ctx) {
		if r.Err != nil {
			return status.Error(codes.InvalidArgument, r.String())
		}
	}
	return nil
}

// prepare is what every stream starts with: it checks the request, the source
// server and its settings, and plans each table, failing with a status whose
// code says whether retrying can help. At creation (grants) it first tries the
// user's privileges on the tables, which a stream start does not: a table a
// session holds locked would hold up the whole stream, replay included.
func (s *Server) prepare(ctx context.Context, req *rowliftv1.StreamRequest, checkGrants bool) (*rowliftv1.StreamOptions, []*tablePlan, dbconn.Flavor, error) {
	if req.GetProtocol() != rowcodec.StreamProtocol {
		// Unavailable, which the applier retries: the stream resumes once both
		// sides run the same version.
		return nil, nil, "", status.Errorf(codes.Unavailable, "the applier speaks stream protocol %d and this streamer %d: "+
			"run the same rowlift version on both", req.GetProtocol(), rowcodec.StreamProtocol)
	}
	opts, err := checkRequest(req)
	if err != nil {
		return nil, nil, "", status.Error(codes.InvalidArgument, err.Error())
	}
	if err := s.ping(ctx); err != nil {
		return nil, nil, "", err
	}
	flavor, err := s.checkSource(ctx)
	if err != nil {
		return nil, nil, "", status.Error(codes.FailedPrecondition, err.Error())
	}
	if checkGrants {
		var tables []string
		for _, t := range req.GetTables() {
			tables = append(tables, t.GetName())
		}
		if err := s.checkTableGrants(ctx, req.GetDatabase(), tables); err != nil {
			return nil, nil, "", err
		}
	}
	plans, err := s.plan(ctx, req)
	if err != nil {
		return nil, nil, "", err
	}
	return opts, plans, flavor, nil
}

// ping checks that the source takes the streamer's credentials over the TLS
// its DSN asks for, failing with PermissionDenied when it does not and
// Unavailable when it cannot be reached.
func (s *Server) ping(ctx context.Context) error {
	if err := dbconn.Ping(ctx, s.db, s.cfg, "source"); err != nil {
		if errors.Is(err, dbconn.ErrAccessDenied) || errors.Is(err, dbconn.ErrTLS) {
			return status.Error(codes.PermissionDenied, err.Error())
		}
		return status.Error(codes.Unavailable, err.Error())
	}
	return nil
}

func (s *Server) stream(ctx context.Context, req *rowliftv1.StreamRequest, stream grpc.ServerStreamingServer[rowliftv1.StreamResponse], log *zap.Logger) error {
	opts, plans, flavor, err := s.prepare(ctx, req, false)
	if err != nil {
		return err
	}
	start, err := s.startPosition(ctx, req, flavor)
	if err != nil {
		return err
	}
	server, err := s.checkHistory(ctx, req.GetWorkflow(), start, flavor, log)
	if err != nil {
		return err
	}
	ahead, err := s.ahead(ctx, plans, start, flavor, log)
	if err != nil {
		return err
	}
	m := newMerger(gtidPos{start.Clone()})
	if err := s.mergeTables(ctx, m, req, plans, log); err != nil {
		return err
	}
	watch := newDumpWatch(start, flavor == dbconn.MariaDB, log)
	syncer, events, err := s.startBinlog(ctx, start, flavor, watch, log)
	if err != nil {
		return err
	}
	defer syncer.Close()

	// Fields first, then the start position, which a new workflow's applier
	// commits before anything else so that a restart resumes from it.
	first := &rowliftv1.StreamResponse{Protocol: rowcodec.StreamProtocol}
	for _, p := range plans {
		first.Items = append(first.Items, &rowliftv1.StreamItem{Item: &rowliftv1.StreamItem_Fields{Fields: p.fields}})
	}
	first.Items = append(first.Items, &rowliftv1.StreamItem{Item: &rowliftv1.StreamItem_Heartbeat{Heartbeat: &rowliftv1.Heartbeat{
		Position: &rowliftv1.Position{GtidSet: start.String()}, SourceTimeUs: time.Now().UnixMicro(), SourceServer: server}}})
	if err := stream.Send(first); err != nil {
		return err
	}
	log.Info("stream started", zap.Int("tables", len(plans)), zap.Stringer("position", start), zap.String("source_server", server))

	g, ctx := errgroup.WithContext(ctx)
	items := make(chan *rowliftv1.StreamItem, sendQueue)
	inputs := make(chan mergeInput, 64)
	reads := make(chan mergeInput, readQueue)
	lag := &replayLag{}
	gate := s.newGate(req, opts, lag, log)
	tables := make([]string, len(plans))
	for i, p := range plans {
		tables[i] = p.table.Name
	}
	sent := metrics.NewSendStream(req.GetWorkflow(), tables)
	g.Go(func() error { return send(ctx, stream, items, opts.PacketBytes, sent) })
	g.Go(func() error {
		return s.mergeLoop(ctx, m, inputs, reads, items, start, flavor, time.Duration(opts.HeartbeatMs)*time.Millisecond, gate.throttled, watch.waiting, log)
	})
	g.Go(func() error { return watch.run(ctx, s.db) })
	g.Go(func() error {
		r := newBinlogReader(events, req.GetDatabase(), plans, start.Clone())
		r.watch, r.log = watch, log
		for {
			res, err := r.next(ctx)
			if err != nil {
				if ctx.Err() != nil {
					return ctx.Err()
				}
				if isReplicationDenied(err) {
					return s.replicationDenied(ctx, err)
				}
				return binlogError(err, r.pos)
			}
			if res.tx != nil {
				lag.read(res.tx.pos.(gtidPos).set, time.Now())
			}
			if r.skipRows {
				// Past the change only the reader's position moves on: a chunk
				// whose snapshot held its table after the change is due (and
				// void, merger.voids) once the reader has passed that point.
				res = readResult{pos: res.pos}
			}
			if err := (mergeSink{reads}).send(ctx, mergeInput{read: &res}); err != nil {
				return err
			}
			// The stream ends once the change is sent (send): the next one
			// reads what follows with the tables as they are then, where this
			// one's conversions and copy no longer fit them. This one reads
			// on for the dump's liveness and the chunks' positions.
			r.skipRows = r.skipRows || (res.tx != nil && ddlscope.ReopensStream(res.tx.item.GetDdl()))
			if ahead != nil && !r.skipRows && res.pos.covers(ahead.at) {
				return ahead.err
			}
		}
	})
	g.Go(func() error {
		fences := &fenceStats{}
		if err := s.copyTables(ctx, req, plans, opts, mergeSink{inputs}, gtidPos{start.Clone()}, gate, flavor, newFencers(flavor, s.db, req.GetDatabase(), fences), log); err != nil {
			return err
		}
		log.Info("copy and verify finished", fences.fields()...)
		return nil
	})
	return g.Wait()
}

// aheadOf is where a stream whose plans read tables with the target's fields
// (tablePlan.ahead) must have met a schema change of one of them: at, the
// source's position once the tables were read; err is the difference.
type aheadOf struct {
	at  gtidPos
	err error
}

// ahead returns the point by which the stream must meet a schema change of
// the tables ahead of the target (nil: none is). A stream that starts there
// or past it fails at once: the difference is not one the binlog explains.
func (s *Server) ahead(ctx context.Context, plans []*tablePlan, start *gtid.Set, flavor dbconn.Flavor, log *zap.Logger) (*aheadOf, error) {
	var errs []error
	for _, p := range plans {
		if p.ahead != nil {
			errs = append(errs, p.ahead)
		}
	}
	differs := errors.Join(errs...)
	if differs == nil {
		return nil, nil
	}
	err := status.Error(codes.FailedPrecondition, differs.Error())
	text, perr := s.visible(ctx, flavor)
	if perr != nil {
		return nil, status.Errorf(codes.Unavailable, "read the source's position: %v", perr)
	}
	at, perr := gtid.Parse(text)
	if perr != nil {
		return nil, status.Errorf(codes.Internal, "source position %q: %v", text, perr)
	}
	if start.Contains(at) {
		return nil, err
	}
	log.Info("the source's tables have changed shape since the stream's position: their rows are read as the target has them "+
		"until the schema change, which must come before the source's position", zap.Stringer("position", at), zap.Error(differs))
	return &aheadOf{at: gtidPos{at}, err: err}, nil
}

// copyTables runs a rowStreamer for every table still copying, and one of
// verify chunks for every copied table the workflow verifies, at most
// ParallelTables at once, each on its own source connection.
func (s *Server) copyTables(ctx context.Context, req *rowliftv1.StreamRequest, plans []*tablePlan, opts *rowliftv1.StreamOptions,
	sink chunkSink, start position, gate *copyGate, flavor dbconn.Flavor, fencers func() fencer, log *zap.Logger) error {
	g, ctx := errgroup.WithContext(ctx)
	g.SetLimit(int(opts.ParallelTables))
	spanAttrs := []attribute.KeyValue{tracing.Workflow.String(req.GetWorkflow()), tracing.SourceAddress.String(s.cfg.Addr)}
	for i, t := range req.GetTables() {
		progress := t.GetCopy().GetLastPk()
		verifying := verifies(t)
		switch {
		case t.GetCopy().GetDone() && !verifying, plans[i].ahead != nil:
			// A table ahead of the target is read by the next stream, after
			// the schema change that ends this one.
			continue
		case verifying:
			progress = t.GetVerify().GetLastPk()
		}
		var lastPK [][]byte
		if progress != nil {
			vals, err := rowcodec.Values(nil, progress)
			if err != nil {
				return status.Errorf(codes.InvalidArgument, "last PK of %s: %v", t.GetName(), err)
			}
			lastPK = vals
		}
		plan := plans[i]
		g.Go(func() error {
			conn, err := s.db.Conn(ctx)
			if err != nil {
				return status.Error(codes.Unavailable, dbconn.Explain(err, s.cfg, "source").Error())
			}
			defer conn.Close()
			fence := fencers()
			defer fence.close()
			// Joined first: a chunk read and taken by every member before a
			// stream joins is gone, and that stream reads it again.
			var shared *chunkMember
			if plan.filter != nil && !verifying {
				shared = s.chunks.join(chunkGroupKey(req.GetWorkflow(), plan, opts), sharedChunkBytes(opts.ChunkBytes))
				defer shared.leave()
			}
			// A verify's rows are hashes, as narrow whatever the table: its
			// first chunk measures them.
			var avg int64
			if !verifying {
				if avg, err = avgRowBytes(ctx, conn, plan.table.Database, plan.table.Name); err != nil {
					return status.Errorf(codes.Unavailable, "average row length of %s: %v", t.GetName(), err)
				}
			}
			r := &rowStreamer{plan: plan, conn: conn, fence: fence, sizer: newChunkSizer(opts.ChunkBytes, opts.ChunkRows, avg),
				packetBytes: int(opts.PacketBytes), sink: sink, start: start, lastPK: lastPK, gate: gate, verify: verifying, attrs: spanAttrs,
				shared: shared, log: log.With(zap.String("table", plan.table.Name))}
			if verifying {
				vp, err := verify.NewPlan(ctx, s.db, plan.table, t.GetColumns(), plan.jsonText)
				if err != nil {
					return status.Errorf(codes.FailedPrecondition, "verify %s: %v", t.GetName(), err)
				}
				r.plan = plan.verifying(vp, t.GetVerify().GetRepair())
				if plan.filter == nil {
					// A reshard's chunks are filtered by key range row by row
					// (on the target too): they send row hashes.
					r.digest = newDigestPlan(plan, vp, flavor, opts.ChunkRows)
				}
				if through := t.GetVerify().GetRowsThrough(); through != nil {
					r.rechecking = true
					if len(through.GetLengths()) > 0 {
						if r.recheckTo, err = rowcodec.Values(nil, through); err != nil {
							return status.Errorf(codes.InvalidArgument, "verify %s: rows_through: %v", t.GetName(), err)
						}
					}
				}
				return verifyFailed(req.GetDatabase(), t.GetName(), r.run(ctx))
			}
			return r.run(ctx)
		})
	}
	return g.Wait()
}

// avgRowBytes is the table's average row length by the source's statistics
// (0: none gathered yet), where the copy's chunk sizes start from.
func avgRowBytes(ctx context.Context, conn *sql.Conn, database, table string) (int64, error) {
	var avg sql.NullInt64
	err := conn.QueryRowContext(ctx, "SELECT AVG_ROW_LENGTH FROM information_schema.TABLES WHERE TABLE_SCHEMA = ? AND TABLE_NAME = ?",
		database, table).Scan(&avg)
	if errors.Is(err, sql.ErrNoRows) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("read information_schema.TABLES: %w", err)
	}
	return avg.Int64, nil
}

// Source errors after which a table's verify chunks cannot be read again.
const (
	errNoSuchTable = 1146 // ER_NO_SUCH_TABLE
	errBadDB       = 1049 // ER_BAD_DB_ERROR
	errBadField    = 1054 // ER_BAD_FIELD_ERROR
)

// verifyFailed turns an error that will end every further verify chunk of
// the table the same way (the table or a column it reads is gone: a cutover's
// freeze renamed it, or someone dropped it) into one that carries a
// VerifyFailure: the applier then ends that table's verify, saying why, and
// the stream goes on without it instead of failing at the same position
// forever. Other errors are returned as they are.
func verifyFailed(database, table string, err error) error {
	var what string
	switch dbconn.ServerError(err) {
	case errNoSuchTable, errBadDB:
		what = fmt.Sprintf("table %s.%s no longer exists on the source (renamed by a cutover, or dropped?)", database, table)
	case errBadField:
		what = fmt.Sprintf("table %s.%s on the source no longer has a column the verify reads (altered?)", database, table)
	default:
		return err
	}
	msg := fmt.Sprintf("%s: %v; run the verify again on the workflow that now streams it", what, err)
	st, derr := status.New(codes.Aborted, "verify "+table+": "+msg).WithDetails(&rowliftv1.VerifyFailure{Table: table, Message: msg})
	if derr != nil {
		return err
	}
	return st.Err()
}

// verifies reports whether the stream sends verify chunks of a table: its
// copy is done and a verify of it is not.
func verifies(t *rowliftv1.TableRequest) bool {
	return t.GetCopy().GetDone() && t.GetVerify() != nil && !t.GetVerify().GetDone()
}

// send packs items into messages of about packetBytes and sends them in order,
// recording each message and the copy chunks in it in stats.
func send(ctx context.Context, stream grpc.ServerStreamingServer[rowliftv1.StreamResponse], items <-chan *rowliftv1.StreamItem, packetBytes int64,
	stats *metrics.SendStream) error {
	for {
		var item *rowliftv1.StreamItem
		select {
		case item = <-items:
		case <-ctx.Done():
			return ctx.Err()
		}
		msg := &rowliftv1.StreamResponse{Items: []*rowliftv1.StreamItem{item}, Protocol: rowcodec.StreamProtocol}
		size := itemSize(item)
		// Add whatever else is already waiting, up to the packet size.
	batch:
		for size < packetBytes {
			select {
			case next := <-items:
				msg.Items = append(msg.Items, next)
				size += itemSize(next)
			default:
				break batch
			}
		}
		if err := stream.Send(msg); err != nil {
			return fmt.Errorf("send to applier: %w", err)
		}
		for _, item := range msg.GetItems() {
			if ddlscope.ReopensStream(item.GetDdl()) {
				return fmt.Errorf("%w (%s)", errEndsAtDDL, item.GetDdl().GetGtid())
			}
		}
		// Sending computed the message's size and cached it: reading it back
		// does not walk the message again.
		stats.Sent(cachedSize.Size(msg))
		for _, item := range msg.GetItems() {
			if c := item.GetChunk(); c != nil && !c.GetVerify() {
				stats.ChunkSent(c.GetTable())
			}
		}
	}
}

// cachedSize reads the size a marshal cached in a message.
var cachedSize = proto.MarshalOptions{UseCachedSize: true}

func itemSize(item *rowliftv1.StreamItem) int64 {
	return int64(len(item.GetChunk().GetPackedRows())) + 64
}

func checkRequest(req *rowliftv1.StreamRequest) (*rowliftv1.StreamOptions, error) {
	if req.GetDatabase() == "" {
		return nil, errors.New("stream request names no source database")
	}
	if len(req.GetTables()) == 0 {
		return nil, errors.New("stream request names no tables")
	}
	kr, sharded, err := keyRange(req.GetKeyRange())
	if err != nil {
		return nil, fmt.Errorf("stream request: %w", err)
	}
	seen := map[string]bool{}
	for _, t := range req.GetTables() {
		name := strings.ToLower(t.GetName())
		if name == "" || seen[name] {
			return nil, fmt.Errorf("stream request names table %q twice or empty", t.GetName())
		}
		seen[name] = true
		if !sharded || t.GetReference() {
			continue
		}
		if _, err := checkSharding(t); err != nil {
			return nil, fmt.Errorf("stream request with key range %s: %w", kr, err)
		}
	}
	o := &rowliftv1.StreamOptions{
		ChunkRows:       req.GetOptions().GetChunkRows(),
		ChunkBytes:      req.GetOptions().GetChunkBytes(),
		PacketBytes:     req.GetOptions().GetPacketBytes(),
		ParallelTables:  req.GetOptions().GetParallelTables(),
		HeartbeatMs:     req.GetOptions().GetHeartbeatMs(),
		Throttle:        req.GetOptions().GetThrottle(),
		ThrottleCheckMs: req.GetOptions().GetThrottleCheckMs(),
		JsonAsText:      req.GetOptions().GetJsonAsText(),
		MaxReplayLagMs:  req.GetOptions().GetMaxReplayLagMs(),
	}
	if o.MaxReplayLagMs == 0 {
		o.MaxReplayLagMs = DefaultMaxReplayLag.Milliseconds()
	}
	if err := throttle.Check("source", o.Throttle); err != nil {
		return nil, err
	}
	if o.ChunkRows <= 0 {
		o.ChunkRows = DefaultChunkRows
	}
	if o.ChunkBytes <= 0 {
		o.ChunkBytes = DefaultChunkBytes
	}
	if o.PacketBytes <= 0 {
		o.PacketBytes = DefaultPacketBytes
	}
	if o.ParallelTables <= 0 {
		o.ParallelTables = DefaultParallelTables
	}
	if o.HeartbeatMs <= 0 {
		o.HeartbeatMs = DefaultHeartbeatMs
	}
	return o, nil
}

// checkSource reads the source's flavor and refuses settings the stream cannot
// work with, naming every wrong one with the statement that fixes it.
func (s *Server) checkSource(ctx context.Context) (dbconn.Flavor, error) {
	flavor, version, err := dbconn.ServerFlavor(ctx, s.db)
	if err != nil {
		return "", fmt.Errorf("source %s: %w", s.cfg.Addr, err)
	}
	var logBin bool
	if err := s.db.QueryRowContext(ctx, "SELECT @@log_bin").Scan(&logBin); err != nil {
		return "", fmt.Errorf("read source log_bin: %w", err)
	}
	if !logBin {
		return "", fmt.Errorf("source %s (%s) has the binary log off: start it with --log-bin (rowlift fences chunks by binlog position)", s.cfg.Addr, version)
	}
	var wrong []error
	for _, want := range requiredSettings[flavor] {
		var got string
		if err := s.db.QueryRowContext(ctx, "SELECT @@GLOBAL."+want.name).Scan(&got); err != nil {
			if want.optional && isMySQLError(err, unknownSystemVariable) {
				continue
			}
			return "", fmt.Errorf("read source %s: %w", want.name, err)
		}
		if !strings.EqualFold(got, want.value) {
			wrong = append(wrong, fmt.Errorf("source %s has %s=%s; rowlift needs %s because %s: %s",
				s.cfg.Addr, want.name, quoteSetting(got), want.setting(), want.why, want.fix(flavor)))
		}
	}
	if err := s.checkReplicaLogs(ctx, flavor); err != nil {
		wrong = append(wrong, err)
	}
	return flavor, errors.Join(wrong...)
}

// checkReplicaLogs refuses a replica source that does not log what it
// replicates: the stream reads the source's binlog, which would then leave
// out every change the primary makes. A server is taken for a replica when
// it is read-only or, on MariaDB, has applied replicated transactions
// (gtid_slave_pos), both of which any user may read.
func (s *Server) checkReplicaLogs(ctx context.Context, flavor dbconn.Flavor) error {
	name, query := "log_replica_updates", "SELECT @@GLOBAL.log_replica_updates, @@GLOBAL.read_only, ''"
	fix := "SET PERSIST_ONLY log_replica_updates=ON and restart the server"
	if flavor == dbconn.MariaDB {
		name, query = "log_slave_updates", "SELECT @@GLOBAL.log_slave_updates, @@GLOBAL.read_only, @@GLOBAL.gtid_slave_pos"
		fix = "set log_slave_updates=ON in the server's config file and restart the server"
	}
	var logs, readOnly bool
	var replicated string
	if err := s.db.QueryRowContext(ctx, query).Scan(&logs, &readOnly, &replicated); err != nil {
		return fmt.Errorf("read source %s: %w", name, err)
	}
	if logs || !readOnly && replicated == "" {
		return nil
	}
	why := "read-only"
	if !readOnly {
		why = "has applied replicated transactions (gtid_slave_pos " + replicated + ")"
	}
	return fmt.Errorf("source %s is %s, so a replica, and has %s=OFF; rowlift needs %s=ON on a replica source because its binlog, which the "+
		"stream reads, otherwise leaves out every change the replica applies: %s", s.cfg.Addr, why, name, name, fix)
}

// unknownSystemVariable is the error of reading a variable the server does
// not have (MySQL may drop binlog_format, deprecated since 8.0.34).
const unknownSystemVariable = 1193

// sourceSetting is a server setting the stream relies on.
type sourceSetting struct {
	name, value, why string
	// optional settings are checked only where the server still has them.
	optional bool
	// steps is how to reach the value on MySQL when one SET PERSIST cannot.
	steps string
}

func (w sourceSetting) setting() string { return w.name + "=" + quoteSetting(w.value) }

// fix is the statement that sets it: MariaDB has no SET PERSIST, so the
// config file must change too; MySQL's SET PERSIST survives restarts.
func (w sourceSetting) fix(flavor dbconn.Flavor) string {
	if flavor == dbconn.MySQL {
		if w.steps != "" {
			return w.steps
		}
		return "SET PERSIST " + w.setting()
	}
	return "SET GLOBAL " + w.setting() + " (and in the server's config file)"
}

func quoteSetting(v string) string {
	if v == "" {
		return "''"
	}
	return v
}

// requiredSettings are the source settings the stream relies on, by flavor,
// each with why.
var requiredSettings = map[dbconn.Flavor][]sourceSetting{
	dbconn.MariaDB: {
		{name: "binlog_format", value: "ROW", why: "it replays row images, not statements"},
		{name: "binlog_row_image", value: "FULL", why: "it applies changes by key and checks before images, which need every column"},
		{name: "binlog_row_metadata", value: "FULL", why: "column names and signedness are only in the binlog with full metadata"},
		{name: "gtid_strict_mode", value: "1", why: "positions are GTID sets, exact only when sequence numbers only grow"},
	},
	dbconn.MySQL: {
		{name: "binlog_format", value: "ROW", why: "it replays row images, not statements", optional: true},
		{name: "binlog_row_image", value: "FULL", why: "it applies changes by key and checks before images, which need every column"},
		{name: "binlog_row_metadata", value: "FULL", why: "column names and signedness are only in the binlog with full metadata"},
		{name: "enforce_gtid_consistency", value: "ON", why: "positions are GTID sets, which every transaction must have"},
		{name: "gtid_mode", value: "ON", why: "positions are GTID sets, which every transaction must have",
			steps: "SET PERSIST enforce_gtid_consistency=ON, then SET PERSIST gtid_mode=OFF_PERMISSIVE, SET PERSIST gtid_mode=ON_PERMISSIVE " +
				"and, once SHOW STATUS LIKE 'Ongoing_anonymous_transaction_count' is 0, SET PERSIST gtid_mode=ON"},
	},
}

// plan loads every requested table and its column list, failing with a status
// that names the table when one cannot be streamed.
func (s *Server) plan(ctx context.Context, req *rowliftv1.StreamRequest) ([]*tablePlan, error) {
	var plans []*tablePlan
	for _, t := range req.GetTables() {
		tbl, err := s.loadTable(ctx, req, t)
		if err != nil {
			return nil, schemaStatus(err)
		}
		p, err := newTablePlan(tbl, t.GetColumns(), req.GetOptions().GetJsonAsText())
		if err != nil {
			return nil, schemaStatus(err)
		}
		if p, err = p.behind(t.GetTarget(), req.GetTargetDatabase(), req.GetOptions().GetJsonAsText()); err != nil {
			return nil, schemaStatus(err)
		}
		if kr, sharded, err := keyRange(req.GetKeyRange()); err != nil {
			return nil, status.Error(codes.InvalidArgument, err.Error())
		} else if sharded && !t.GetReference() {
			fn, err := checkSharding(t)
			if err != nil {
				return nil, status.Error(codes.InvalidArgument, err.Error())
			}
			if err := p.shard(t.GetShardingColumn(), fn, kr); err != nil {
				return nil, err
			}
		}
		plans = append(plans, p)
	}
	return plans, nil
}

// loadTable reads a streamed table's metadata. While a cutover has the table
// frozen (renamed to its frozen name), it is described from the frozen twin,
// which has the same columns and keys, so a stream restarted during the freeze
// still comes up; the binlog reader keeps streaming changes of the live name
// only, so the reverse workflow's writes into the twin never flow back. A
// frozen table cannot be copied: its copy must be done.
func (s *Server) loadTable(ctx context.Context, req *rowliftv1.StreamRequest, t *rowliftv1.TableRequest) (*schema.Table, error) {
	db := req.GetDatabase()
	tbl, err := schema.Load(ctx, s.db, db, t.GetName())
	if !errors.Is(err, schema.ErrNoTable) {
		return tbl, err
	}
	twin, nameErr := frozen.Name(t.GetName())
	if nameErr != nil {
		return nil, err
	}
	twinTbl, twinErr := schema.Load(ctx, s.db, db, twin)
	switch {
	case errors.Is(twinErr, schema.ErrNoTable):
		// A cutover may have renamed the twin back between the two reads.
		if tbl, again := schema.Load(ctx, s.db, db, t.GetName()); again == nil {
			return tbl, nil
		}
		// The server hides a table from a user who may not read it: a SELECT
		// revoked after creation would read as a dropped table, which stops
		// the workflow, rather than as a grant to give again.
		_, probe := s.db.ExecContext(ctx, "SELECT 1 FROM "+rowcodec.QualifiedIdent(db, t.GetName())+" LIMIT 0")
		if grants.Denied(probe) {
			return nil, s.missingGrants(ctx, []grants.Grant{selectGrant(db, t.GetName())})
		}
		return nil, err
	case twinErr != nil:
		return nil, twinErr
	case !t.GetCopy().GetDone():
		return nil, status.Errorf(codes.FailedPrecondition, "table %s.%s is frozen by a cutover (renamed to %s) and its copy is not done, "+
			"so it cannot be copied: unfreeze it (Streamer.Unfreeze, or RENAME TABLE %s TO %s) and the workflow goes on",
			db, t.GetName(), twin, rowcodec.QualifiedIdent(db, twin), rowcodec.QualifiedIdent(db, t.GetName()))
	}
	twinTbl.Name = t.GetName()
	// A target that lacks the table creates it under its own name.
	twinTbl.CreateTable = strings.Replace(twinTbl.CreateTable, "CREATE TABLE "+rowcodec.Ident(twin),
		"CREATE TABLE "+rowcodec.Ident(t.GetName()), 1)
	s.log.Info("table is frozen by a cutover: described from its frozen twin, streaming changes to the live name only",
		zap.String("workflow", req.GetWorkflow()), zap.String("table", db+"."+t.GetName()), zap.String("frozen", twin))
	return twinTbl, nil
}

func schemaStatus(err error) error {
	if _, isStatus := status.FromError(err); isStatus {
		return err
	}
	switch {
	case errors.Is(err, schema.ErrNoTable):
		return status.Errorf(codes.NotFound, "%v on the source: check the workflow's table list and source database", err)
	case errors.Is(err, schema.ErrColumn):
		return status.Error(codes.InvalidArgument, err.Error())
	case errors.Is(err, schema.ErrNoKey):
		return status.Error(codes.FailedPrecondition, err.Error())
	}
	return status.Error(codes.Unavailable, err.Error())
}
