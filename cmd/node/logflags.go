package main

import (
	"flag"
	"fmt"
	"io"
	"log/slog"
	"strings"
)

// logOptions are the --log and --log-level flags of the commands that log
// (serve, mcp): a value neither names is refused when the flags are
// parsed, not taken for the default.
type logOptions struct {
	format string
	level  slog.Level
}

func logFlags(fs *flag.FlagSet) *logOptions {
	o := &logOptions{format: "text", level: slog.LevelInfo}
	fs.Func("log", "log format: text or json (default text)", func(v string) error {
		switch v {
		case "text", "json":
			o.format = v
			return nil
		}
		return fmt.Errorf("%q: want text or json", v)
	})
	fs.Func("log-level", "least level logged: debug, info, warn or error (default info)", func(v string) error {
		switch strings.ToLower(v) {
		case "debug":
			o.level = slog.LevelDebug
		case "info":
			o.level = slog.LevelInfo
		case "warn", "warning":
			o.level = slog.LevelWarn
		case "error":
			o.level = slog.LevelError
		default:
			return fmt.Errorf("%q: want debug, info, warn or error", v)
		}
		return nil
	})
	return o
}

// logger is the command's logger on w, redacted with the node's
// redactor once the node has registered its secrets (redact.go).
func (o *logOptions) logger(w io.Writer) *slog.Logger {
	opts := &slog.HandlerOptions{Level: o.level}
	return redactingLogger(w, func(w io.Writer) slog.Handler {
		if o.format == "json" {
			return slog.NewJSONHandler(w, opts)
		}
		return slog.NewTextHandler(w, opts)
	})
}
