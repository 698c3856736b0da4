package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/goccy/go-yaml"
	"github.com/nats-io/nats.go"
	njs "github.com/nats-io/nats.go/jetstream"

	"github.com/cairn-agents/cairn/api"
	mcpcaps "github.com/cairn-agents/cairn/capabilities/mcp"
	"github.com/cairn-agents/cairn/events"
	"github.com/cairn-agents/cairn/projections"
	"github.com/cairn-agents/cairn/projections/replay"
	"github.com/cairn-agents/cairn/runtime"
	"github.com/cairn-agents/cairn/store/jetstream"
)

// replayCmd is `node replay RUN`: the run reconstructed from the log at a
// revision (its timeline, or with --json its checkpoint and transcript),
// re-driven against the recorded responses (--redrive), forked from a
// revision into a new session (--fork), or diffed with another revision or
// run (--diff, --diff-run). It reads the log only, except --fork, which
// writes the new session.
func replayCmd(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("replay", flag.ContinueOnError)
	fs.SetOutput(stderr)
	o := replayOptions{}
	fs.StringVar(&o.data, "data", ".cairn", "JetStream data directory of the embedded server")
	fs.StringVar(&o.natsURL, "nats", "", "existing NATS server URL")
	fs.StringVar(&o.agentsDir, "agents", "examples/agents", "directory of agent definitions (for --redrive and --fork --agent)")
	fs.StringVar(&o.at, "at", "", "revision: N, last or last-K (default last)")
	fs.BoolVar(&o.json, "json", false, "print the reconstructed state (checkpoint, window, transcript) as JSON")
	fs.BoolVar(&o.redrive, "redrive", false, "run the loop again from --at (default: the start) against the recorded responses; report differences")
	fs.BoolVar(&o.acceptContract, "accept-contract-change", false, "with --redrive: re-drive a log written under another contract (definition version or build); everything else must match")
	fs.BoolVar(&o.fork, "fork", false, "start a new run in a new session from revision --at")
	fs.StringVar(&o.forkAgent, "agent", "", "with --fork: resume under this agent's current definition (another version)")
	fs.StringVar(&o.model, "model", "", "with --fork: the model the fork runs with (openai:..., anthropic:..., scripted:FILE)")
	fs.StringVar(&o.diff, "diff", "", "diff revision --at with this revision of the same run")
	fs.StringVar(&o.diffRun, "diff-run", "", "diff the run with this run, revision by revision")
	fs.BoolVar(&o.raw, "raw", false, "print what the run saw unredacted, secrets included (replay reads the log itself: whoever runs it can read them anyway)")
	fs.StringVar(&o.mcpServers, "mcp-servers", "", "the node's MCP servers file: their secrets are redacted too")
	config := fs.String("config", "", "the node's configuration file (serve's --config): replay takes data, nats, stream, payload-keys and mcp-servers from it, and redacts the tokens it names")
	payloadKeysFlag(fs, &o.keys)
	streamFlag(fs, &o.stream)
	if err := parseFlags(fs, args, "data", "nats", "agents", "model", "payload-keys", "stream", "mcp-servers", "config"); err != nil {
		return parseFailed(stderr, "node replay", err)
	}
	if *config != "" {
		var err error
		if o.configTokens, err = applyNodeConfig(fs, *config); err != nil {
			fmt.Fprintln(stderr, "node replay:", err)
			return 2
		}
	}
	if fs.NArg() != 1 {
		fmt.Fprintln(stderr, "node replay: want one RUN")
		return 2
	}
	o.run = fs.Arg(0)
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	// What replay prints comes from the log, which holds what the run saw:
	// it is redacted like every other view, with the node's secrets read
	// from the node's configuration (a JSON document on its decoded
	// strings, text as a whole). When the node recorded secrets this
	// command was not given, it prints nothing but the reason.
	var red runtime.Redactor = runtime.Secrets{}
	if !o.raw {
		set, missing, err := replayRedactor(o)
		if err == nil && len(missing) > 0 {
			err = &missingSecretsError{names: missing}
		}
		if err != nil {
			fmt.Fprintln(stderr, "node replay:", err)
			return 1
		}
		red = set
	}
	o.red = red
	out := &redactingWriter{w: stdout, red: red, json: o.json}
	err := replayRun(ctx, o, out)
	if ferr := out.Flush(); err == nil {
		err = ferr
	}
	if err != nil {
		fmt.Fprintln(stderr, "node replay:", err)
		var bad *flagError
		if errors.As(err, &bad) {
			return 2
		}
		return 1
	}
	return 0
}

type replayOptions struct {
	data, natsURL, agentsDir, at, forkAgent, diff, diffRun, run, model, stream string
	json, redrive, fork, acceptContract, raw                                   bool
	keys                                                                       payloadKeys
	// mcpServers is the node's MCP servers file; configTokens the tokens
	// (token to principal) and the metrics token its --config names.
	mcpServers   string
	configTokens nodeConfigTokens
	// red is the redactor of what replay prints (none with --raw).
	red runtime.Redactor
}

// replayRedactor is the node's redactor as replay can build it: from the
// configuration the node reads (the provider keys, CAIRN_TOKENS,
// CAIRN_TOKEN, CAIRN_METRICS_TOKEN and CAIRN_NATS_ROUTE_SECRET in the
// environment; --mcp-servers, --payload-keys and --config; the data
// directory's NATS credentials). missing names the secrets the node
// recorded in the data directory that this configuration lacks.
func replayRedactor(o replayOptions) (set runtime.Redactor, missing []string, err error) {
	cands := secretNames{}
	providerSecrets(cands)
	tokens, err := parseTokens(os.Getenv("CAIRN_TOKENS"))
	if err != nil {
		return nil, nil, err
	}
	for tok, who := range o.configTokens.tokens {
		tokens[tok] = who
	}
	if tok := os.Getenv(envName("token")); tok != "" {
		tokens[tok] = "default"
	}
	metricsToken := os.Getenv(envName("metrics-token"))
	if metricsToken == "" {
		metricsToken = o.configTokens.metrics
	}
	tokenSecrets(cands, tokens, metricsToken)
	if o.mcpServers != "" {
		cfg, err := mcpcaps.LoadConfig(o.mcpServers)
		if err != nil {
			return nil, nil, err
		}
		mcpSecrets(cands, cfg)
	}
	if err := natsSecrets(cands, o.data, o.natsURL); err != nil {
		return nil, nil, err
	}
	if err := payloadKeySecrets(cands, o.keys.path); err != nil {
		return nil, nil, fmt.Errorf("payload keys: %w", err)
	}
	patterns, refused := runtime.NewSecrets(cands)
	if o.natsURL == "" {
		recorded, ok, err := readSecretsRecord(o.data)
		if err != nil {
			return nil, nil, err
		}
		if ok {
			have := registered(cands, refused)
			for _, name := range recorded {
				if !slices.Contains(have, name) {
					missing = append(missing, name)
				}
			}
		}
	}
	return patterns.Compile(), missing, nil
}

// missingSecretsError is a replay without secrets the node redacts.
type missingSecretsError struct{ names []string }

func (e *missingSecretsError) Error() string {
	return fmt.Sprintf("the node redacts secrets this command was not given (%s): run it with the node's configuration "+
		"(the same environment, --mcp-servers, --payload-keys, or --config), or with --raw to print the run unredacted", strings.Join(e.names, ", "))
}

// flagError is a bad flag value, named.
type flagError struct{ Flag, Reason string }

func (e *flagError) Error() string { return fmt.Sprintf("--%s: %s", e.Flag, e.Reason) }

// parseRevision reads a revision flag against a run's last revision
// (replay.ParseRevision), naming the flag.
func parseRevision(flagName, s string, last, def int64) (int64, error) {
	rev, err := replay.ParseRevision(s, last, def)
	if err != nil {
		return 0, &flagError{flagName, err.Error()}
	}
	return rev, nil
}

func replayRun(ctx context.Context, o replayOptions, w io.Writer) error {
	if o.fork && o.at == "" {
		return &flagError{"at", "--fork needs the revision to fork from"}
	}
	nc, closeConn, err := connect(nodeOptions{data: o.data, natsURL: o.natsURL, stream: o.stream})
	if err != nil {
		return err
	}
	var once sync.Once
	closeNATS := func() { once.Do(closeConn) }
	defer closeNATS()
	js, err := njs.New(nc)
	if err != nil {
		return err
	}
	src := replay.Source{JS: js, Stream: o.stream, Keys: o.keys.ring}
	h, err := replay.Load(ctx, src, o.run)
	if err != nil {
		return err
	}
	if !o.redrive && !o.fork { // they need the log as it is
		if h, err = redactedHistory(h, o.red); err != nil {
			return err
		}
	}
	last := h.Last()
	if last == 0 {
		return fmt.Errorf("run %s has no commit yet", o.run)
	}
	switch {
	case o.redrive:
		from, err := parseRevision("at", o.at, last, 0)
		if err != nil {
			return err
		}
		s, err := replaySetup(o.agentsDir, h.Run.Agent)
		if err != nil {
			return err
		}
		s.AcceptContractChange = o.acceptContract
		rep, err := replay.Redrive(ctx, h, from, s)
		if err != nil {
			return err
		}
		return printRedrive(w, rep, o.json, o.red)
	case o.fork:
		at, err := parseRevision("at", o.at, last, last)
		if err != nil {
			return err
		}
		return forkRun(ctx, w, nc, js, h, at, o, closeNATS)
	case o.diffRun != "":
		other, err := replay.Load(ctx, src, o.diffRun)
		if err != nil {
			return fmt.Errorf("--diff-run: %w", err)
		}
		if other, err = redactedHistory(other, o.red); err != nil {
			return err
		}
		replay.PrintChanges(w, replay.DiffRuns(h, other))
		return nil
	}
	at, err := parseRevision("at", o.at, last, last)
	if err != nil {
		return err
	}
	st, err := h.At(at)
	if err != nil {
		return err
	}
	if o.diff != "" {
		rev, err := parseRevision("diff", o.diff, last, last)
		if err != nil {
			return err
		}
		other, err := h.At(rev)
		if err != nil {
			return err
		}
		// The earlier revision is the "-" side and the later the "+",
		// whichever of --at and --diff names which, as diff(1) shows an
		// older file and a newer one; the header names both.
		from, to, a, b := at, rev, st, other
		if rev < at {
			from, to, a, b = rev, at, other, st
		}
		fmt.Fprintf(w, "--- run %s revision %d\n+++ run %s revision %d\n", h.Run.RunID, from, h.Run.RunID, to)
		replay.PrintChanges(w, replay.DiffStates(a, b))
		return nil
	}
	if o.json {
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(map[string]any{"run": h.Run, "state": st, "timeline": h.Timeline(at), "budget": h.Usage(at)})
	}
	replay.Print(w, h, at)
	fmt.Fprintf(w, "at revision %d of %d: phase %s, step %d, %d calls journaled, window of %d messages\n",
		at, last, st.Checkpoint.Phase, st.Checkpoint.Step, len(st.Checkpoint.Calls), len(st.Window))
	return nil
}

// printRedrive prints a re-drive's report; the excerpts of a divergence
// are redacted before they are cut (a secret across the cut would leave
// its head behind).
func printRedrive(w io.Writer, rep *replay.Report, asJSON bool, red runtime.Redactor) error {
	if asJSON {
		return json.NewEncoder(w).Encode(rep)
	}
	fmt.Fprintf(w, "re-drove run %s from revision %d: %d attempts, %d of %d logged writes reproduced\n", rep.RunID, rep.From, rep.Attempts, rep.Reproduced, rep.Logged)
	if d := rep.Divergence; d != nil {
		fmt.Fprintf(w, "DIVERGES at attempt %d, write %d (revision %d): %s\n  fields: %s\n  logged:    %.400s\n  re-driven: %.400s\n",
			d.Attempt, d.Write, d.Revision, red.Redact(d.Reason), strings.Join(d.Fields, ", "), red.Redact(d.Logged), red.Redact(d.Redriven))
		return nil
	}
	if rep.ContractChanged != "" {
		fmt.Fprintf(w, "contract changed (accepted): %s\n", rep.ContractChanged)
	}
	if rep.Exact() {
		fmt.Fprintln(w, "identical: the loop makes exactly the logged commits")
	}
	return nil
}

// redactedHistory is h with every event's payload redacted (on its
// decoded strings), read again: the timeline and the diffs cut long texts
// and show a newline as a sign, and a secret cut or changed so is no
// longer found in the printed text.
func redactedHistory(h *replay.History, red runtime.Redactor) (*replay.History, error) {
	evs := make([]projections.Event, len(h.Events))
	for i, e := range h.Events {
		if len(e.Data) > 0 {
			e.Data = api.RedactJSON(red, e.Data)
		}
		evs[i] = e
	}
	out, err := replay.FromEvents(h.RunID, evs)
	if err != nil {
		return nil, fmt.Errorf("run %s redacted: %w", h.RunID, err)
	}
	return out, nil
}

// replaySetup is the run's contract as the deployment in agentsDir
// defines it.
func replaySetup(agentsDir, agent string) (replay.Setup, error) {
	dep, err := loadDeployment(agentsDir)
	if err != nil {
		return replay.Setup{}, err
	}
	return setupFor(dep, agent)
}

// forkRun writes the fork, then starts a node on the same log that adopts
// the forked run and runs it to its end (with --model, another model).
func forkRun(ctx context.Context, w io.Writer, nc *nats.Conn, js njs.JetStream, h *replay.History, at int64, o replayOptions, closeNATS func()) error {
	store, err := logStore(ctx, nc, js, o.stream, "replay-fork", o.keys.ring)
	if err != nil {
		return err
	}
	defer store.Close(context.WithoutCancel(ctx))
	opts := replay.ForkOptions{SessionID: "fork-" + randomID(), RunID: "fork-" + randomID(), At: at}
	if o.forkAgent != "" {
		s, err := replaySetup(o.agentsDir, o.forkAgent)
		if err != nil {
			return err
		}
		if opts.ContractHash, err = replay.ContractHash(s); err != nil {
			return err
		}
		opts.Agent = o.forkAgent
	}
	rec, err := replay.Fork(ctx, store, h, opts)
	if err != nil {
		return err
	}
	fmt.Fprintf(w, "forked run %s at revision %d into run %s (session %s); the original is untouched.\n", h.RunID, at, rec.RunID, rec.SessionID)
	// The embedded server holds the data directory: release it before the
	// node starts its own.
	closeNATS()
	a, err := startApp(ctx, nodeOptions{agentsDir: o.agentsDir, data: o.data, natsURL: o.natsURL, stream: o.stream, model: o.model, keys: o.keys, logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		return err
	}
	defer a.close(context.Background())
	if err := a.node.Adopt(ctx, rec.SessionID, rec.RunID); err != nil {
		return err
	}
	st, reply, err := a.node.Result(ctx, rec.SessionID, rec.RunID)
	if err != nil {
		return fmt.Errorf("forked run %s: %w", rec.RunID, err)
	}
	out, _ := json.Marshal(reply)
	fmt.Fprintf(w, "forked run %s %s: %s\n", rec.RunID, st, out)
	return nil
}

// logStore opens the store on the log as it is: with the stream's own
// replica count (a clustered node's stream is R3), so the store's check of
// the stream's configuration passes.
func logStore(ctx context.Context, nc *nats.Conn, js njs.JetStream, stream, holder string, keys *events.Keyring) (*jetstream.Store, error) {
	stream = events.StreamName(stream)
	st, err := js.Stream(ctx, stream)
	if err != nil {
		return nil, fmt.Errorf("stream %s: %w", stream, err)
	}
	// Schema 1: a fork (the only writer here) lists every commit whole,
	// what a node of every build reads: this process cannot know which
	// builds the cluster runs.
	return jetstream.New(ctx, nc, jetstream.Config{Stream: stream, Holder: holder, Replicas: st.CachedInfo().Config.Replicas, Now: time.Now, Keys: keys,
		Schema: func() int { return 1 }})
}

func randomID() string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// nodeConfigTokens are the secrets a node's configuration file names.
type nodeConfigTokens struct {
	tokens  map[string]string // token to principal
	metrics string
}

// replayConfigSettings are the settings of a node's configuration file
// (serve's --config) replay takes for its own flags of the same names.
var replayConfigSettings = []string{"data", "nats", "stream", "payload-keys", "mcp-servers"}

// applyNodeConfig reads a node's configuration file (YAML or JSON, as
// applyConfig does): it sets the replayConfigSettings that neither the
// command line nor their variables set, and returns the tokens it names
// (token, "default"'s, and metrics-token). Serve's other settings are no
// concern of replay's and are skipped.
func applyNodeConfig(fs *flag.FlagSet, path string) (nodeConfigTokens, error) {
	out := nodeConfigTokens{tokens: map[string]string{}}
	raw, err := os.ReadFile(path)
	if err != nil {
		return out, fmt.Errorf("config: %w", err)
	}
	js := raw
	if !strings.HasSuffix(path, ".json") {
		if js, err = yaml.YAMLToJSON(raw); err != nil {
			return out, fmt.Errorf("config %s: %w", path, err)
		}
	}
	var values map[string]any
	if err := json.Unmarshal(js, &values); err != nil {
		return out, fmt.Errorf("config %s: %w", path, err)
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	for _, name := range replayConfigSettings {
		if v, ok := values[name]; ok && !set[name] {
			if err := fs.Set(name, fmt.Sprint(v)); err != nil {
				return out, fmt.Errorf("config %s: %s: %w", path, name, err)
			}
		}
	}
	if v, ok := values["token"]; ok {
		out.tokens[fmt.Sprint(v)] = "default"
	}
	if v, ok := values["metrics-token"]; ok {
		out.metrics = fmt.Sprint(v)
	}
	return out, nil
}
