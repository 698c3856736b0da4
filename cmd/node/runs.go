package main

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/cairn-agents/cairn/actors"
	"github.com/cairn-agents/cairn/api"
	"github.com/cairn-agents/cairn/events"
	"github.com/cairn-agents/cairn/runtime"
)

// runsCmd talks to a serving node: runs start AGENT MESSAGE | ls | show RUN
// | tail RUN | cancel RUN.
func runsCmd(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("runs", flag.ContinueOnError)
	fs.SetOutput(stderr)
	apiURL := fs.String("api", "http://127.0.0.1:8700", "node API URL")
	token := fs.String("token", "", "bearer token")
	asJSON := fs.Bool("json", false, "print JSON")
	key := fs.String("key", "", "start: the idempotency key (default: a new random one); a start retried with it returns the same run")
	retryFor := fs.Duration("retry-for", time.Minute, "start: how long to retry refused connections and 5xx answers (with the same key)")
	// ls: the filters of GET /v1/runs, passed as they are (the node checks them).
	filters := map[string]*string{}
	for _, f := range []struct{ name, usage string }{
		{"status", "ls: runs in any of these statuses (running,waiting,needs_input,completed,failed,cancelled,purged)"},
		{"agent", "ls: runs of this agent"},
		{"parent", "ls: the children of this run"},
		{"children", "ls: true lists children as well as roots"},
		{"since", "ls: created at or after this time (RFC 3339)"},
		{"until", "ls: created before this time (RFC 3339)"},
		{"q", "ls: runs whose run or session ID starts with this"},
		{"limit", "ls: runs on a page (1 to 1000, default 100)"},
		{"cursor", "ls: the page after the one that printed it"},
	} {
		filters[f.name] = fs.String(f.name, "", f.usage)
	}
	if len(args) == 0 {
		fmt.Fprintln(stderr, "node runs: want start AGENT MESSAGE, ls, show RUN, tail RUN or cancel RUN")
		return 2
	}
	verb := args[0]
	if err := parseFlags(fs, args[1:], "api", "token"); err != nil {
		return parseFailed(stderr, "node runs", err)
	}
	c := &client{base: strings.TrimRight(*apiURL, "/"), token: *token, http: &http.Client{}}
	arg := func() (string, bool) {
		if fs.NArg() != 1 {
			fmt.Fprintf(stderr, "node runs %s: want one RUN\n", verb)
			return "", false
		}
		return fs.Arg(0), true
	}
	var err error
	switch verb {
	case "start":
		if fs.NArg() < 2 {
			fmt.Fprintln(stderr, "node runs start: want AGENT MESSAGE")
			return 2
		}
		k := *key
		if k == "" {
			k = newIdempotencyKey()
		} else if why := actors.IdempotencyKeyProblem(k); why != "" {
			fmt.Fprintf(stderr, "node runs start: --key: %s\n", why)
			return 2
		}
		ctx, cancel := context.WithTimeout(context.Background(), *retryFor)
		defer cancel()
		var out startAnswer
		if out, err = c.start(ctx, fs.Arg(0), strings.Join(fs.Args()[1:], " "), k); err == nil {
			if *asJSON {
				return printJSON(stdout, out)
			}
			fmt.Fprintf(stdout, "%s %s\n", out.RunID, out.SessionID)
		}
	case "ls":
		var out struct {
			Runs []map[string]any `json:"runs"`
			Next string           `json:"next_cursor,omitempty"`
		}
		q := url.Values{}
		for name, v := range filters {
			if *v != "" {
				q.Set(name, *v)
			}
		}
		path := "/v1/runs"
		if len(q) > 0 {
			path += "?" + q.Encode()
		}
		if err = c.do("GET", path, nil, &out); err == nil {
			if *asJSON {
				return printJSON(stdout, out)
			}
			for _, r := range out.Runs {
				fmt.Fprintf(stdout, "%-24v %-12v %-11v %v\n", r["run_id"], r["agent"], r["status"], r["created"])
			}
			if out.Next != "" {
				fmt.Fprintf(stdout, "more: node runs ls --cursor %s (with the same filters)\n", out.Next)
			}
		}
	case "show":
		id, ok := arg()
		if !ok {
			return 2
		}
		var out map[string]any
		if err = c.do("GET", "/v1/runs/"+id, nil, &out); err == nil {
			return printJSON(stdout, out)
		}
	case "cancel":
		id, ok := arg()
		if !ok {
			return 2
		}
		var out map[string]any
		if err = c.do("POST", "/v1/runs/"+id+"/cancel", strings.NewReader("{}"), &out); err == nil {
			fmt.Fprintf(stdout, "%v %v\n", out["run_id"], out["status"])
		}
	case "tail":
		id, ok := arg()
		if !ok {
			return 2
		}
		err = c.tail(id, stdout, *asJSON)
	default:
		fmt.Fprintf(stderr, "node runs: unknown verb %q\n", verb)
		return 2
	}
	if err != nil {
		fmt.Fprintln(stderr, "node runs:", err)
		return 1
	}
	return 0
}

func printJSON(w io.Writer, v any) int {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	if err := enc.Encode(v); err != nil {
		return 1
	}
	return 0
}

type client struct {
	base, token string
	http        *http.Client
	// retried, when set, is told of each failed try of a start before it
	// is tried again.
	retried func(attempt int, err error)
}

func (c *client) request(method, path string, body io.Reader) (*http.Response, error) {
	return c.requestCtx(context.Background(), method, path, body, nil)
}

func (c *client) requestCtx(ctx context.Context, method, path string, body io.Reader, header http.Header) (*http.Response, error) {
	req, err := http.NewRequestWithContext(ctx, method, c.base+path, body)
	if err != nil {
		return nil, err
	}
	maps.Copy(req.Header, header)
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	return c.http.Do(req)
}

func (c *client) do(method, path string, body io.Reader, out any) error {
	resp, err := c.request(method, path, body)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode >= 300 {
		return apiError(method, path, resp)
	}
	return json.NewDecoder(resp.Body).Decode(out)
}

// startAnswer is what `runs start` prints.
type startAnswer struct {
	RunID          string `json:"run_id"`
	SessionID      string `json:"session_id"`
	IdempotencyKey string `json:"idempotency_key"`
	// Existing: the node answered with a run the key had started before
	// (an earlier try of this start whose answer was lost, or a reused key).
	Existing bool `json:"existing"`
}

// newIdempotencyKey is a key for one start: random, so two starts never
// share it, and one start's retries always do.
func newIdempotencyKey() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return "cli-" + hex.EncodeToString(b[:])
}

// start posts a run with an idempotency key and retries it, with the same
// key, on any transport error (a refused connection, a connection lost
// before the answer) and on 5xx answers until ctx ends: the key makes
// every retry safe, and one whose first try started the run returns that
// run. 4xx answers are final.
func (c *client) start(ctx context.Context, agent, message, key string) (startAnswer, error) {
	body, err := json.Marshal(map[string]string{"agent": agent, "message": message})
	if err != nil {
		return startAnswer{}, err
	}
	header := http.Header{api.IdempotencyHeader: []string{key}}
	delay := 200 * time.Millisecond
	for attempt := 1; ; attempt++ {
		resp, err := c.requestCtx(ctx, "POST", "/v1/runs", bytes.NewReader(body), header)
		wait := delay
		if err == nil {
			if resp.StatusCode < 500 {
				defer resp.Body.Close()
				if resp.StatusCode >= 300 {
					return startAnswer{}, apiError("POST", "/v1/runs", resp)
				}
				out := startAnswer{IdempotencyKey: key, Existing: resp.StatusCode == http.StatusOK}
				if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
					return startAnswer{}, fmt.Errorf("POST /v1/runs: answer: %w", err)
				}
				return out, nil
			}
			err = apiError("POST", "/v1/runs", resp)
			if s, perr := strconv.Atoi(resp.Header.Get("Retry-After")); perr == nil && s > 0 && s <= 30 {
				wait = time.Duration(s) * time.Second
			}
			resp.Body.Close()
		}
		if ctx.Err() != nil {
			return startAnswer{}, fmt.Errorf("start with idempotency key %s: gave up after %d tries: %w", key, attempt, err)
		}
		if c.retried != nil {
			c.retried(attempt, err)
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return startAnswer{}, fmt.Errorf("start with idempotency key %s: gave up after %d tries: %w", key, attempt, err)
		case <-t.C:
		}
		delay = min(2*delay, 5*time.Second)
	}
}

// apiError reads an API error answer.
func apiError(method, path string, resp *http.Response) error {
	var e struct {
		Error struct{ Code, Message string } `json:"error"`
	}
	_ = json.NewDecoder(resp.Body).Decode(&e)
	return fmt.Errorf("%s %s: %d %s: %s", method, path, resp.StatusCode, e.Error.Code, e.Error.Message)
}

// tailLines are the lines of one event of the stream: those `node run`
// prints for the same commit (runtime.SinkEventsOf), the run's end, or,
// for an event it cannot read, what it is. agent is the run's, learnt
// from its created event (the stream's first).
func tailLines(agent *string, event string, data []byte) []string {
	if event == "error" {
		return []string{"!! " + string(data)}
	}
	e, err := events.Decode(data)
	if err != nil {
		return []string{fmt.Sprintf(".. %s: %v", event, err)}
	}
	switch e.Type {
	case events.RunCreated:
		var r events.Run
		if e.Payload(&r) == nil {
			*agent = r.Agent
		}
	case events.CheckpointCommitted:
		if e.DataRef != nil {
			return []string{fmt.Sprintf("%-13s .. revision %d: its payload is in the object store (%d bytes): node replay shows it", *agent, e.Revision, e.DataRef.Size)}
		}
		var p events.Checkpoint
		if err := e.Payload(&p); err != nil {
			return []string{fmt.Sprintf(".. revision %d: %v", e.Revision, err)}
		}
		var out []string
		for _, ev := range runtime.SinkEventsOf(&p.Checkpoint) {
			if line, ok := sinkLine(*agent, ev); ok {
				out = append(out, line)
			}
		}
		return out
	case events.RunEnded:
		var end events.Ended
		if e.Payload(&end) == nil {
			line := fmt.Sprintf("%-13s == %s", *agent, end.Status)
			if end.Reason != "" {
				line += ": " + end.Reason
			}
			return []string{line}
		}
	}
	return nil
}

// tail prints a run's events as they are committed, as `node run` does.
func (c *client) tail(id string, w io.Writer, raw bool) error {
	resp, err := c.request("GET", "/v1/runs/"+id+"/events", nil)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("tail %s: %s", id, resp.Status)
	}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(nil, 16<<20)
	event, agent := "", ""
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, "event: "):
			event = strings.TrimPrefix(line, "event: ")
		case strings.HasPrefix(line, "data: "):
			data := strings.TrimPrefix(line, "data: ")
			if raw {
				fmt.Fprintln(w, data)
				continue
			}
			if event == "end" {
				continue
			}
			for _, line := range tailLines(&agent, event, []byte(data)) {
				fmt.Fprintln(w, line)
			}
		}
	}
	return sc.Err()
}
