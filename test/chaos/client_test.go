package chaos_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cairn-agents/cairn/test/chaos"
)

// client submits root runs as a real client would: each submission has
// its own Idempotency-Key; an ambiguous failure (no answer, connection
// refused or reset, a timeout, 5xx, 408, 429) is retried with the same key
// against any node, until acknowledged or the client's deadline. Most are
// researcher runs, whose children exercise the parents' waits; every third
// of a submitter's is a fact-checker run, which has no subagents and so
// keeps its budget in its own log (the budget audit).
type client struct {
	e    *env
	http *http.Client

	ctx    context.Context // ends the retries
	cancel context.CancelFunc
	stop   chan struct{} // no new submissions
	wg     sync.WaitGroup

	mu       sync.Mutex
	subs     []*submission
	acked    chan struct{} // closed at the first acknowledgement
	lastAck  time.Time
	retried  int // submissions that needed more than one request
	attempts int
}

type submission struct {
	key, runID string
	// agent and message are the request's: a retry sends the same, as the
	// key's idempotency asks.
	agent, message string
	attempts       int
	lastErr        string
}

// newSubmission is a submitter's i-th submission. Its agent follows from
// i alone, so it draws nothing from the submitter's random stream and a
// seed's schedule is unchanged.
func newSubmission(seed int64, worker, i int) *submission {
	key := fmt.Sprintf("%d-w%d-%d", seed, worker, i)
	if i%3 == 2 {
		// The fact-checker takes a JSON object (its input_schema); the
		// key's tag is in its claim, where KeyOf still finds it: Message
		// has no character JSON escapes.
		claim, _ := json.Marshal(map[string]string{"claim": chaos.Message(key)})
		return &submission{key: key, agent: "fact-checker", message: string(claim)}
	}
	return &submission{key: key, agent: "researcher", message: chaos.Message(key)}
}

// startClient starts a client of two submitters on e and waits for its
// first acknowledged submission.
func startClient(t *testing.T, e *env) *client {
	t.Helper()
	cl := newClient(e)
	cl.start(2)
	select {
	case <-cl.acked:
	case <-time.After(2 * time.Minute):
		e.report(nil, true)
		t.Fatalf("seed %d: no submission acknowledged within 2 minutes of the start", e.seed)
	}
	return cl
}

func newClient(e *env) *client {
	ctx, cancel := context.WithCancel(context.Background())
	c := &client{
		e: e, ctx: ctx, cancel: cancel, stop: make(chan struct{}), acked: make(chan struct{}),
		// A request the node does not answer within 10 s is ambiguous: the
		// client retries it.
		http: &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}},
	}
	e.t.Cleanup(func() { c.cancel(); c.wg.Wait() })
	return c
}

// start runs n submitters, each with its own random stream from the seed.
func (c *client) start(n int) {
	for w := range n {
		c.wg.Add(1)
		go func() {
			defer c.wg.Done()
			rng := rand.New(rand.NewPCG(uint64(c.e.seed), uint64(w)+1))
			for i := 0; ; i++ {
				select {
				case <-c.stop:
					return
				case <-c.ctx.Done():
					return
				default:
				}
				s := newSubmission(c.e.seed, w, i)
				c.mu.Lock()
				c.subs = append(c.subs, s)
				c.mu.Unlock()
				c.submit(rng, s)
				// Pacing of the workload, not synchronization.
				select {
				case <-c.stop:
					return
				case <-time.After(time.Duration(100+rng.IntN(300)) * time.Millisecond):
				}
			}
		}()
	}
}

// finish stops new submissions and lets the pending ones retry until
// deadline.
func (c *client) finish(deadline time.Time) {
	close(c.stop)
	t := time.AfterFunc(time.Until(deadline), c.cancel)
	c.wg.Wait()
	t.Stop()
}

func (c *client) submit(rng *rand.Rand, s *submission) {
	backoff := 200 * time.Millisecond
	for {
		p := c.e.nodes[rng.IntN(len(c.e.nodes))]
		status, runID, body, err := c.post(p, s)
		c.mu.Lock()
		s.attempts++
		c.attempts++
		if s.attempts == 2 {
			c.retried++
		}
		c.mu.Unlock()
		switch {
		case err == nil && status/100 == 2 && runID != "":
			c.mu.Lock()
			s.runID = runID
			c.lastAck = time.Now()
			select {
			case <-c.acked:
			default:
				close(c.acked)
			}
			c.mu.Unlock()
			return
		case err == nil && status/100 == 2:
			c.e.violate("submission %s: %s answered %d without a run_id: %s", s.key, p.name, status, body)
			return
		case err == nil && status/100 == 4 && status != http.StatusRequestTimeout && status != http.StatusTooManyRequests:
			c.e.violate("submission %s refused by %s (attempt %d): %d %s", s.key, p.name, s.attempts, status, body)
			return
		case err != nil:
			s.lastErr = fmt.Sprintf("%s: %v", p.name, err)
		default:
			s.lastErr = fmt.Sprintf("%s: %d %s", p.name, status, body)
		}
		select {
		case <-c.ctx.Done():
			return
		case <-time.After(backoff/2 + time.Duration(rng.Int64N(int64(backoff)))):
		}
		backoff = min(2*backoff, 2*time.Second)
	}
}

func (c *client) post(p *proc, s *submission) (status int, runID, body string, err error) {
	reqBody, _ := json.Marshal(map[string]string{"agent": s.agent, "message": s.message})
	req, err := http.NewRequestWithContext(c.ctx, http.MethodPost, fmt.Sprintf("http://127.0.0.1:%d/v1/runs", p.http), strings.NewReader(string(reqBody)))
	if err != nil {
		return 0, "", "", err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Idempotency-Key", s.key)
	res, err := c.http.Do(req)
	if err != nil {
		return 0, "", "", err
	}
	defer res.Body.Close()
	b, err := io.ReadAll(io.LimitReader(res.Body, 1<<16))
	if err != nil {
		return 0, "", "", err
	}
	var out struct {
		RunID string `json:"run_id"`
	}
	_ = json.Unmarshal(b, &out)
	return res.StatusCode, out.RunID, strings.TrimSpace(string(b)), nil
}

// submissions is what the client knows: every key it sent, with the run an
// acknowledgement named.
func (c *client) submissions() (subs []chaos.Submission, acked, unacked int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, s := range c.subs {
		subs = append(subs, chaos.Submission{Key: s.key, RunID: s.runID})
		if s.runID != "" {
			acked++
		} else {
			unacked++
		}
	}
	return subs, acked, unacked
}

// unackedErrs describes the submissions never acknowledged.
func (c *client) unackedErrs() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []string
	for _, s := range c.subs {
		if s.runID == "" {
			out = append(out, fmt.Sprintf("%s after %d attempts: %s", s.key, s.attempts, s.lastErr))
		}
	}
	return out
}
