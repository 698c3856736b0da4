package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/cairn-agents/cairn/actors"
	"github.com/cairn-agents/cairn/events"
	"github.com/cairn-agents/cairn/runtime"
)

func runCmd(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("run", flag.ContinueOnError)
	fs.SetOutput(stderr)
	data := fs.String("data", ".cairn", "JetStream data directory of the embedded server")
	natsURL := fs.String("nats", "", "existing NATS server URL")
	modelFlag := fs.String("model", "", "model for every agent")
	resume := fs.String("resume", "", "continue this run")
	noSync := fs.Bool("nosync", false, "embedded server without SyncAlways")
	var gc commitMode
	groupCommitFlag(fs, &gc)
	asJSON := fs.Bool("json", false, "print the result as JSON only")
	mcpServers := fs.String("mcp-servers", "", "file of MCP servers whose tools are capabilities (YAML or JSON)")
	var keys payloadKeys
	payloadKeysFlag(fs, &keys)
	var stream string
	streamFlag(fs, &stream)
	if err := parseFlags(fs, args, "group-commit", "mcp-servers", "payload-keys", "stream"); err != nil {
		return parseFailed(stderr, "node run", err)
	}
	rest := fs.Args()
	if len(rest) < 1 || (*resume == "" && len(rest) < 2) {
		fmt.Fprintln(stderr, "node run: want AGENT_FILE and TASK (or --resume RUN AGENT_FILE)")
		return 2
	}
	// run counts the interrupts itself (the first drains, a second stops).
	err := run(context.Background(), runOptions{file: rest[0], task: strings.Join(rest[1:], " "), data: *data, natsURL: *natsURL,
		model: *modelFlag, resume: *resume, noSync: *noSync, json: *asJSON, mcpServers: *mcpServers, groupCommit: gc, keys: keys, stream: stream}, stdout)
	var interrupted *interruptedError
	switch {
	case errors.As(err, &interrupted):
		resumeArgs := []string{"run", "--data", *data}
		fs.Visit(func(f *flag.Flag) { // the flags given that the continuation needs too
			switch f.Name {
			case "nats", "model", "nosync", "mcp-servers", "group-commit", "payload-keys", "stream":
				resumeArgs = append(resumeArgs, "--"+f.Name+"="+f.Value.String())
			}
		})
		resumeArgs = append(resumeArgs, "--resume", interrupted.run, rest[0])
		fmt.Fprintf(stderr, "\ninterrupted. Continue from the last commit with:\n  %s\n", commandLine(os.Args[0], resumeArgs))
		return 130
	case err != nil:
		fmt.Fprintln(stderr, "node run:", err)
		return 1
	}
	return 0
}

// commandLine is the command that runs this program with args, as a shell
// reads it: "go run ./cmd/node" when the program is a binary `go run`
// built (in the build cache's temporary directory), its path as invoked
// otherwise. Arguments a shell would split or expand are quoted.
func commandLine(argv0 string, args []string) string {
	prog := shellQuote(argv0)
	if strings.Contains(filepath.ToSlash(argv0), "/go-build") && filepath.Base(argv0) == "node" {
		prog = "go run ./cmd/node"
	}
	parts := []string{prog}
	for _, a := range args {
		parts = append(parts, shellQuote(a))
	}
	return strings.Join(parts, " ")
}

// shellQuote quotes s for a POSIX shell when it has anything but plain
// characters.
func shellQuote(s string) string {
	if s != "" && strings.IndexFunc(s, func(r rune) bool {
		return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("-_./=:,+@%", r))
	}) < 0 {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

type runOptions struct {
	file, task, data, natsURL, model, resume string
	noSync, json                             bool
	mcpServers                               string
	groupCommit                              commitMode
	keys                                     payloadKeys
	stream                                   string
}

// sameKeystroke is how long after the first interrupt another counts as
// the same one (delivered twice), not a second keystroke.
const sameKeystroke = 300 * time.Millisecond

type interruptedError struct{ run string }

func (e *interruptedError) Error() string { return "interrupted" }

func run(ctx context.Context, o runOptions, out io.Writer) error {
	p := &progress{out: out, quiet: o.json}
	// The first interrupt stops waiting for the result and drains the
	// node; a second one stops the drain. Signals are counted from here
	// on, so a second one that comes fast is never lost.
	ctx, interrupt := context.WithCancel(ctx)
	defer interrupt()
	drain, stopNow := context.WithCancel(context.Background())
	defer stopNow()
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	defer signal.Stop(sigs)
	// asked is closed once the node has said that Ctrl-C again stops it,
	// sameKeystroke after the first: an interrupt before that is the
	// first one reaching the node again, not a second keystroke. Seen
	// under load: one kill(-pgid) arriving while a JavaScript worker was
	// being started (its child, before it leaves the node's process
	// group, is a second receiver) was told to the node twice, 200 µs
	// apart, and stopped the drain the first asked for.
	asked := make(chan struct{})
	go func() {
		for n := 1; ; n++ {
			select {
			case <-sigs:
			case <-drain.Done():
				return
			}
			if n == 1 {
				interrupt()
				continue
			}
			select {
			case <-asked:
			default:
				n--
				continue
			}
			p.say("stopping now")
			stopNow()
			return
		}
	}()
	a, err := startApp(ctx, nodeOptions{agentsDir: filepath.Dir(o.file), data: o.data, natsURL: o.natsURL, stream: o.stream, model: o.model, noSync: o.noSync, mcpServers: o.mcpServers, groupCommit: o.groupCommit, keys: o.keys,
		sink: p.emit, logger: (&logOptions{format: "text", level: slog.LevelWarn}).logger(os.Stderr)})
	if err != nil {
		return err
	}
	defer a.close(context.Background())
	var root *deployed
	for _, d := range a.dep.agents {
		if same(d.file, o.file) {
			root = d
		}
	}
	if root == nil {
		return fmt.Errorf("%s: not an agent definition", o.file)
	}
	node := a.node
	var sessionID, runID, rootRunID string
	if o.resume != "" {
		rec, err := node.Lookup(ctx, o.resume)
		if err != nil {
			return err
		}
		sessionID, runID, rootRunID = rec.SessionID, rec.RunID, rec.RootRunID
		p.say("resuming run %s (%s) from its last commit", runID, rec.Agent)
	} else {
		if sessionID, runID, err = node.Run(ctx, root.spec.Slug, o.task); err != nil {
			return err
		}
		rootRunID = runID
		p.say("run %s of %s started (session %s)", runID, root.spec.Slug, sessionID)
	}
	st, reply, err := node.Result(ctx, sessionID, runID)
	if ctx.Err() != nil {
		p.say("\ninterrupted: the run stops at its next commit (in %s at most)", actors.DefaultDrainTimeout)
		go func() {
			// An interrupt that reaches the node again comes within
			// microseconds; a second keystroke is counted from here.
			t := time.NewTimer(sameKeystroke)
			defer t.Stop()
			select {
			case <-t.C:
				close(asked) // before it is said: a second one may follow at once
				p.say("Ctrl-C again stops it now")
			case <-drain.Done():
			}
		}()
		a.close(drain)
		return &interruptedError{run: runID}
	}
	steps, in, outTok, uerr := node.Usage(context.Background(), rootRunID)
	if err != nil {
		return err
	}
	// The tree's runs may still print (the root's own last lines follow
	// its commit, which Result may see first): the result is written under
	// the progress lines' lock. The reply holds what the run saw (a
	// model's echo of a secret): it is redacted as every view is.
	if o.json {
		return p.write(func(out io.Writer) error {
			w := &redactingWriter{w: out, red: a.red, json: true}
			if err := json.NewEncoder(w).Encode(map[string]any{"run_id": runID, "session_id": sessionID, "status": st, "reply": reply,
				"steps": steps, "input_tokens": in, "output_tokens": outTok}); err != nil {
				return err
			}
			return w.Flush()
		})
	}
	return p.write(func(out io.Writer) error {
		w := &redactingWriter{w: out, red: a.red}
		defer w.Flush()
		out = w
		fmt.Fprintf(out, "\n== %s: %s reply, valid against %s's output schema:\n", st, reply.Type, root.spec.Slug)
		if reply.Type == runtime.ReplyNeedsInput {
			fmt.Fprintln(out, reply.Question)
		} else {
			var pretty any
			if json.Unmarshal(reply.Output, &pretty) == nil {
				b, _ := json.MarshalIndent(pretty, "", "  ")
				fmt.Fprintln(out, string(b))
			}
		}
		if uerr == nil {
			fmt.Fprintf(out, "== totals: %d model steps, %d input and %d output tokens (the whole tree)\n", steps, in, outTok)
		}
		return nil
	})
}

func same(a, b string) bool {
	aa, err1 := filepath.Abs(a)
	bb, err2 := filepath.Abs(b)
	return err1 == nil && err2 == nil && aa == bb
}

// progress prints each event of every run of the tree, after its commit.
type progress struct {
	mu    sync.Mutex
	out   io.Writer
	quiet bool
}

func (p *progress) say(format string, args ...any) {
	if p.quiet {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	fmt.Fprintf(p.out, format+"\n", args...)
}

// write calls f with the output under the lock of the progress lines,
// which the runs' goroutines print: one writer at a time.
func (p *progress) write(f func(io.Writer) error) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	return f(p.out)
}

func (p *progress) emit(rec events.Run, ev runtime.SinkEvent) {
	if line, ok := sinkLine(rec.Agent, ev); ok {
		p.say("%s", line)
	}
}

// sinkLine is the line `node run` prints for a sink event of an agent's
// run, and `runs tail` for the same event read back from the log.
func sinkLine(agent string, ev runtime.SinkEvent) (string, bool) {
	who := fmt.Sprintf("%-13s", agent)
	text := strings.Join(strings.Fields(ev.Text), " ")
	if len(text) > 100 {
		text = text[:100] + "..."
	}
	switch ev.Kind {
	case runtime.SinkText:
		return fmt.Sprintf("%s | %s", who, text), true
	case runtime.SinkToolCall:
		if strings.HasPrefix(ev.Tool, runtime.SpawnPrefix) || ev.Tool == runtime.ToolWait || ev.Tool == runtime.ToolComplete {
			return fmt.Sprintf("%s -> %s %s", who, ev.Tool, text), true
		}
		return fmt.Sprintf("%s -> %s", who, ev.Tool), true
	case runtime.SinkToolResult:
		mark := "<-"
		if ev.IsError {
			mark = "<! error"
		}
		return fmt.Sprintf("%s %s %s: %s", who, mark, ev.Tool, text), true
	case runtime.SinkWaiting:
		return fmt.Sprintf("%s .. parked (no goroutine) until its children report back", who), true
	case runtime.SinkCompleted:
		return fmt.Sprintf("%s == completed", who), true
	case runtime.SinkModelFailure:
		// Whole: the retry's wait is at its end, and it is what an
		// operator watching a slow step looks for.
		return fmt.Sprintf("%s !! %s", who, strings.Join(strings.Fields(ev.Text), " ")), true
	}
	return "", false
}
