package logging

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/go-mysql-org/go-mysql/replication"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
)

func TestParseLevel(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want zapcore.Level
		err  string
	}{
		{in: "", want: zapcore.InfoLevel},
		{in: "debug", want: zapcore.DebugLevel},
		{in: "info", want: zapcore.InfoLevel},
		{in: "warn", want: zapcore.WarnLevel},
		{in: "error", want: zapcore.ErrorLevel},
		{in: "fatal", err: `log level "fatal": want one of debug, info, warn, error`},
		{in: "dpanic", err: `log level "dpanic": want one of debug, info, warn, error`},
		{in: "INFO", err: `log level "INFO": want one of debug, info, warn, error`},
		{in: "warning", err: `log level "warning": want one of debug, info, warn, error`},
	} {
		got, err := ParseLevel(tc.in)
		if tc.err != "" {
			require.EqualError(t, err, tc.err, tc.in)
			continue
		}
		require.NoError(t, err, tc.in)
		require.Equal(t, tc.want, got, tc.in)
	}
}

func TestConsole(t *testing.T) {
	for _, tc := range []struct {
		format   string
		terminal bool
		want     bool
		err      string
	}{
		{format: "", terminal: true, want: true},
		{format: "", terminal: false, want: false},
		{format: "console", terminal: true, want: true},
		{format: "console", terminal: false, want: true},
		{format: "json", terminal: true, want: false},
		{format: "json", terminal: false, want: false},
		{format: "text", terminal: true, err: `log format "text": want one of json, console`},
		{format: "JSON", terminal: false, err: `log format "JSON": want one of json, console`},
	} {
		got, err := console(tc.format, tc.terminal)
		if tc.err != "" {
			require.EqualError(t, err, tc.err, tc.format)
			continue
		}
		require.NoError(t, err, tc.format)
		require.Equal(t, tc.want, got, "%q on a terminal: %v", tc.format, tc.terminal)
	}
}

// entries decodes JSON log lines.
func entries(t *testing.T, out string) []map[string]any {
	t.Helper()
	var got []map[string]any
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		if line == "" {
			continue
		}
		var e map[string]any
		require.NoError(t, json.Unmarshal([]byte(line), &e), line)
		got = append(got, e)
	}
	return got
}

func TestNewFormatsAndLevels(t *testing.T) {
	var buf bytes.Buffer
	log, err := New(Options{Level: "warn"}, &buf, false)
	require.NoError(t, err)
	log.Info("dropped")
	log.Warn("kept", zap.String("workflow", "w1"))
	got := entries(t, buf.String())
	require.Len(t, got, 1)
	require.Equal(t, "kept", got[0]["msg"])
	require.Equal(t, "warn", got[0]["level"])
	require.Equal(t, "w1", got[0]["workflow"])

	buf.Reset()
	log, err = New(Options{}, &buf, true)
	require.NoError(t, err)
	log.Info("on a terminal", zap.String("table", "t1"))
	line := buf.String()
	require.Contains(t, line, "INFO")
	require.Contains(t, line, `{"table": "t1"}`)
	require.False(t, json.Valid([]byte(line)), "console output on a terminal: %s", line)

	_, err = New(Options{Format: "xml"}, &buf, false)
	require.EqualError(t, err, `log format "xml": want one of json, console`)
	_, err = New(Options{Level: "trace"}, &buf, false)
	require.EqualError(t, err, `log level "trace": want one of debug, info, warn, error`)
}

// TestGoMySQLDropsConfigDump creates a go-mysql binlog syncer, which logs its
// whole config at info, password included, with a logger at debug: the
// password must not reach the log, while go-mysql's warnings do.
func TestGoMySQLDropsConfigDump(t *testing.T) {
	const password = "planted-Secret-4711"
	var buf bytes.Buffer
	log, err := New(Options{Level: "debug"}, &buf, false)
	require.NoError(t, err)
	log = log.With(zap.String("source", "u@db:3306/"))
	syncer := replication.NewBinlogSyncer(replication.BinlogSyncerConfig{
		ServerID: 7, Flavor: "mariadb", Host: "127.0.0.1", Port: 1, User: "u", Password: password,
		Logger: GoMySQL(log),
	})
	syncer.Close()
	require.NotContains(t, buf.String(), password)
	require.NotContains(t, buf.String(), "create BinlogSyncer")

	GoMySQL(log).Warn("retry sync is disabled", "attempt", 2)
	got := entries(t, buf.String())
	require.Len(t, got, 1, buf.String())
	require.Equal(t, "go-mysql", got[0]["logger"])
	require.Equal(t, "warn", got[0]["level"])
	require.Equal(t, "retry sync is disabled", got[0]["msg"])
	require.Equal(t, "u@db:3306/", got[0]["source"])
	require.EqualValues(t, 2, got[0]["attempt"])
}

// TestRouteDriver makes go-sql-driver/mysql meet a server that hangs up before
// its handshake, which the driver reports on its own logger ("[mysql] ...
// unexpected EOF" on stderr by default): the line must arrive through zap.
func TestRouteDriver(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer lis.Close()
	go func() {
		for {
			c, err := lis.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	var buf bytes.Buffer
	log, err := New(Options{}, &buf, false)
	require.NoError(t, err)
	RouteDriver(log)
	db, err := sql.Open("mysql", "u:p@tcp("+lis.Addr().String()+")/?timeout=5s")
	require.NoError(t, err)
	defer db.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	require.Error(t, db.PingContext(ctx))

	got := entries(t, buf.String())
	require.NotEmpty(t, got)
	require.Equal(t, "mysql", got[0]["logger"])
	require.Equal(t, "warn", got[0]["level"])
	require.Contains(t, got[0]["msg"], "EOF")
}
