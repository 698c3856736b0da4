package main

import (
	"bytes"
	"flag"
	"io"
	"strings"
	"testing"
)

// A --log or --log-level value neither names is refused before anything
// starts, naming the flag (or the variable) and what it wants; before
// this, --log xml logged text without a word.
func TestLogFlagsRefuseBadValues(t *testing.T) {
	for _, tc := range []struct {
		cmd      func([]string, io.Writer) int
		env, val string
		args     []string
		want     string
	}{
		{cmd: serveCmd, args: []string{"--log", "xml"}, want: `-log: "xml": want text or json`},
		{cmd: serveCmd, args: []string{"--log-level", "loud"}, want: `-log-level: "loud": want debug, info, warn or error`},
		{cmd: serveCmd, env: "CAIRN_LOG_LEVEL", val: "loud", want: `CAIRN_LOG_LEVEL: "loud": want debug, info, warn or error`},
		{cmd: serveCmd, env: "CAIRN_LOG", val: "xml", want: `CAIRN_LOG: "xml": want text or json`},
		{cmd: mcpWith, args: []string{"--log-level", "verbose"}, want: `-log-level: "verbose": want debug, info, warn or error`},
	} {
		if tc.env != "" {
			t.Setenv(tc.env, tc.val)
		}
		var errb bytes.Buffer
		args := append([]string{"--data", t.TempDir()}, tc.args...)
		if code := tc.cmd(args, &errb); code != 2 || !strings.Contains(errb.String(), tc.want) {
			t.Errorf("%v (%s=%q): exit %d, stderr %q; want 2 and %q", tc.args, tc.env, tc.val, code, errb.String(), tc.want)
		}
		if tc.env != "" {
			t.Setenv(tc.env, "")
		}
	}
}

// The level chosen is the least one logged, in the format chosen.
func TestLogFlagsLevelAndFormat(t *testing.T) {
	for _, tc := range []struct {
		args      []string
		debug     bool
		info      bool
		jsonLines bool
	}{
		{args: nil, debug: false, info: true},
		{args: []string{"--log-level", "debug"}, debug: true, info: true},
		{args: []string{"--log-level", "WARN", "--log", "json"}, debug: false, info: false, jsonLines: true},
		{args: []string{"--log", "json", "--log-level", "info"}, debug: false, info: true, jsonLines: true},
	} {
		fs := flag.NewFlagSet("t", flag.ContinueOnError)
		o := logFlags(fs)
		if err := fs.Parse(tc.args); err != nil {
			t.Fatal(err)
		}
		var b bytes.Buffer
		l := o.logger(&b)
		l.Debug("a debug record")
		l.Info("an info record")
		l.Warn("a warn record")
		out := b.String()
		if got := strings.Contains(out, "a debug record"); got != tc.debug {
			t.Errorf("%v: debug logged %v; want %v", tc.args, got, tc.debug)
		}
		if got := strings.Contains(out, "an info record"); got != tc.info {
			t.Errorf("%v: info logged %v; want %v", tc.args, got, tc.info)
		}
		if !strings.Contains(out, "a warn record") {
			t.Errorf("%v: warn not logged: %q", tc.args, out)
		}
		if got := strings.HasPrefix(out, "{"); got != tc.jsonLines {
			t.Errorf("%v: JSON %v; want %v: %q", tc.args, got, tc.jsonLines, out)
		}
	}
}

// mcpWith is `node mcp` with no client on its standard input.
func mcpWith(args []string, stderr io.Writer) int {
	return mcpCmd(args, io.NopCloser(strings.NewReader("")), discardCloser{}, stderr)
}

type discardCloser struct{}

func (discardCloser) Write(p []byte) (int, error) { return len(p), nil }
func (discardCloser) Close() error                { return nil }
