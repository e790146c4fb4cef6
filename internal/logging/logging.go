// Package logging builds the zap logger every rowlift role logs through, and
// routes the logs of the MySQL libraries underneath (go-sql-driver/mysql and
// go-mysql) into it, so an operator reads one format and one level setting.
package logging

import (
	"fmt"
	"io"
	"log/slog"
	"strings"

	"github.com/go-sql-driver/mysql"
	"go.uber.org/zap"
	"go.uber.org/zap/exp/zapslog"
	"go.uber.org/zap/zapcore"
)

// Levels are the values --log-level takes, in rising order.
var Levels = []string{"debug", "info", "warn", "error"}

// Formats are the values --log-format takes; empty picks by terminal.
var Formats = []string{"json", "console"}

// Options are the operator's choices, as given on the command line.
type Options struct {
	// Level is one of Levels; empty means info.
	Level string
	// Format is one of Formats; empty means console on a terminal, else JSON.
	Format string
}

// ParseLevel turns a --log-level value into a zap level, refusing anything
// outside Levels (zap alone would also take "dpanic" or "fatal").
func ParseLevel(s string) (zapcore.Level, error) {
	if s == "" {
		return zapcore.InfoLevel, nil
	}
	for _, name := range Levels {
		if s == name {
			return zapcore.ParseLevel(s)
		}
	}
	return 0, fmt.Errorf("log level %q: want one of %s", s, strings.Join(Levels, ", "))
}

// console reports whether format (a --log-format value) asks for console
// output, given whether the output is a terminal.
func console(format string, terminal bool) (bool, error) {
	switch format {
	case "":
		return terminal, nil
	case "console":
		return true, nil
	case "json":
		return false, nil
	}
	return false, fmt.Errorf("log format %q: want one of %s", format, strings.Join(Formats, ", "))
}

// Check refuses a bad level or format, so that a command can say so before
// it starts anything.
func (o Options) Check() error {
	if _, err := ParseLevel(o.Level); err != nil {
		return err
	}
	_, err := console(o.Format, false)
	return err
}

// New builds a logger that writes to w at the chosen level and format;
// terminal says whether w is a terminal, which picks the format when
// opts.Format is empty. Errors are the operator's to fix (bad values).
func New(opts Options, w io.Writer, terminal bool) (*zap.Logger, error) {
	if err := opts.Check(); err != nil {
		return nil, err
	}
	level, _ := ParseLevel(opts.Level)
	asConsole, _ := console(opts.Format, terminal)
	enc := zap.NewProductionEncoderConfig()
	enc.EncodeTime = zapcore.ISO8601TimeEncoder
	encoder := zapcore.NewJSONEncoder(enc)
	if asConsole {
		enc.EncodeLevel = zapcore.CapitalLevelEncoder
		encoder = zapcore.NewConsoleEncoder(enc)
	}
	ws := zapcore.Lock(zapcore.AddSync(w))
	core := zapcore.NewCore(encoder, ws, level)
	// No stack traces on errors: rowlift's errors say what failed and where;
	// the stack of the log call would only bury that.
	return zap.New(core, zap.AddCaller(), zap.ErrorOutput(ws), zap.AddStacktrace(zapcore.DPanicLevel)), nil
}

// RouteDriver sends go-sql-driver/mysql's own messages (a connection that
// died under it: "unexpected EOF", "busy buffer") to log as warnings, instead
// of the driver's "[mysql] ..." lines on stderr. The driver's logger is
// process-wide, so the last call wins.
func RouteDriver(log *zap.Logger) {
	// Both calls fail only on arguments that are never given here (a level
	// zap has no function for, a nil logger).
	std, _ := zap.NewStdLogAt(log.Named("mysql"), zapcore.WarnLevel)
	_ = mysql.SetLogger(std)
}

// GoMySQL is the *slog.Logger to give go-mysql (BinlogSyncerConfig.Logger).
// It keeps warnings and errors only: go-mysql logs its whole configuration,
// the replication password included, at info when a syncer is created.
func GoMySQL(log *zap.Logger) *slog.Logger {
	core := log.Core()
	warn := zap.LevelEnablerFunc(func(l zapcore.Level) bool { return l >= zapcore.WarnLevel && core.Enabled(l) })
	// It fails only if warn enabled a level core does not, which it never does.
	raised, _ := zapcore.NewIncreaseLevelCore(core, warn)
	return slog.New(zapslog.NewHandler(raised, zapslog.WithName("go-mysql")))
}
