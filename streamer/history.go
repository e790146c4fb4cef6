package streamer

import (
	"context"
	"fmt"

	"go.uber.org/zap"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/rowlift/rowlift/internal/dbconn"
	"github.com/rowlift/rowlift/internal/gtid"
	rowliftv1 "github.com/rowlift/rowlift/proto/rowlift/v1"
)

// sourceHistory is what the source has applied, as a stream start compares
// it with the position the target has.
type sourceHistory struct {
	// server is the source server's identity: server_uuid on MySQL, server_id
	// on MariaDB, where GTIDs name the server that wrote them.
	server string
	// readOnly: a replica, which may still be applying what it lacks.
	readOnly bool
	lack     *gtid.Lack
}

// readHistory reads what the source lacks of start (lack nil: nothing). On
// MySQL the server subtracts its gtid_executed from start, over every server
// UUID; on MariaDB start is compared with gtid_binlog_state per domain and
// server id (gtid.MariaDBLack). Both keep purged transactions in the count.
func (s *Server) readHistory(ctx context.Context, start *gtid.Set, flavor dbconn.Flavor) (sourceHistory, error) {
	var h sourceHistory
	if flavor == dbconn.MariaDB {
		var state string
		if err := s.db.QueryRowContext(ctx, "SELECT @@GLOBAL.gtid_binlog_state, @@GLOBAL.read_only, @@GLOBAL.server_id").
			Scan(&state, &h.readOnly, &h.server); err != nil {
			return h, fmt.Errorf("read the source's GTID history: %w", err)
		}
		lack, err := gtid.MariaDBLack(start, state)
		h.lack = lack
		return h, err
	}
	// The common part is start less what the source lacks of it: one read of
	// gtid_executed serves both.
	var lost, common string
	if err := s.db.QueryRowContext(ctx, "SELECT l.lost, GTID_SUBTRACT(?, l.lost), @@GLOBAL.read_only, @@GLOBAL.server_uuid "+
		"FROM (SELECT GTID_SUBTRACT(?, @@GLOBAL.gtid_executed) AS lost) AS l", start.String(), start.String()).
		Scan(&lost, &common, &h.readOnly, &h.server); err != nil {
		return h, fmt.Errorf("read the source's GTID history: %w", err)
	}
	if lost == "" {
		return h, nil
	}
	c, err := gtid.Parse(common)
	if err != nil {
		return h, err
	}
	h.lack = &gtid.Lack{Lost: lost, Common: c}
	return h, nil
}

// checkHistory returns the source server's identity, and fails a stream
// whose source lacks transactions of its start,
// which the target has applied: streamed from there, a MySQL source sends
// what follows without a word, on top of rows it never had, and a MariaDB
// one refuses the position as if it were purged. A read-only source is taken
// for a replica still on its way there (Unavailable: the applier retries); a
// writable one was promoted without them (FailedPrecondition, with the
// LostWrites detail the applier records for RewindWorkflow).
func (s *Server) checkHistory(ctx context.Context, workflow string, start *gtid.Set, flavor dbconn.Flavor, log *zap.Logger) (string, error) {
	h, err := s.readHistory(ctx, start, flavor)
	if err != nil {
		return "", status.Error(codes.Unavailable, err.Error())
	}
	log.Debug("source history", zap.String("source_server", h.server), zap.Stringer("position", start))
	if h.lack == nil {
		return h.server, nil
	}
	if h.readOnly {
		return "", status.Errorf(codes.Unavailable, "the source %s (server %s) is read-only and has not applied transactions the target has: %s; "+
			"the stream starts once this replica has them (if it was promoted without them, make it writable and the workflow stops "+
			"and says how to go on)", s.cfg.Addr, h.server, h.lack.Lost)
	}
	detail := &rowliftv1.LostWrites{Lost: h.lack.Lost, SourceServer: h.server}
	next := "the histories share no known point, so the target tables must be copied again (delete the workflow, empty the target tables, create it again)"
	if h.lack.Common != nil {
		detail.RewindTo = h.lack.Common.String()
		next = fmt.Sprintf("to go on without copying again, run `rowlift workflow rewind %s`: the stream resumes from %s, the last position "+
			"the source has, and a verify with repair puts right the rows those transactions changed", workflow, detail.RewindTo)
	}
	st, err := status.New(codes.FailedPrecondition, fmt.Sprintf("the source %s (server %s) lacks transactions the target has applied: %s. "+
		"Nothing was purged: the source was replaced by a server that never had them (a failover that lost writes), and the target "+
		"still holds their changes; %s", s.cfg.Addr, h.server, h.lack.Lost, next)).WithDetails(detail)
	if err != nil {
		return "", status.Errorf(codes.Internal, "describe lost transactions: %v", err)
	}
	return "", st.Err()
}
