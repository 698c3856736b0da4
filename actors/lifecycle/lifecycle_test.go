package lifecycle_test

import (
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cairn-agents/cairn/actors/lifecycle"
	"github.com/cairn-agents/cairn/internal/scripttest"
)

// TestScripts runs testdata/*.txt: each file drives one activation (or
// several, "new" starts another) event by event and checks the effects and
// the state after. Rewrite with go test ./actors/lifecycle -rewrite.
func TestScripts(t *testing.T) {
	scripttest.Run(t, "testdata/*.txt", func() scripttest.Handler { return newScript().do })
}

type script struct {
	epoch, now time.Time
	run        *lifecycle.Run
}

func newScript() *script {
	epoch := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	return &script{epoch: epoch, now: epoch, run: lifecycle.New(lifecycle.Config{})}
}

func (s *script) do(t *testing.T, c *scripttest.Case) string {
	var b strings.Builder
	for _, line := range c.Input {
		out, err := s.line(line)
		if err != nil {
			t.Fatalf("%s: %s: %v", c.Pos, line, err)
		}
		b.WriteString(out)
	}
	r := s.run
	fmt.Fprintf(&b, "state: %s", r.State())
	if r.Pending() {
		b.WriteString(" wake-owed")
	}
	if r.Kept() {
		b.WriteString(" handle-kept")
	}
	if r.Draining() {
		b.WriteString(" draining")
	}
	if r.Retries() > 0 {
		fmt.Fprintf(&b, " retries=%d", r.Retries())
	}
	return b.String() + "\n"
}

func (s *script) line(line string) (string, error) {
	f := fields(line)
	args := map[string]string{}
	flags := map[string]bool{}
	for _, a := range f[1:] {
		if k, v, ok := strings.Cut(a, "="); ok {
			args[k] = strings.Trim(v, `"`)
		} else {
			flags[a] = true
		}
	}
	var ev lifecycle.Event
	switch f[0] {
	case "new":
		cfg := lifecycle.Config{}
		if v, ok := args["max-retries"]; ok {
			n, err := strconv.Atoi(v)
			if err != nil {
				return "", err
			}
			cfg.MaxRetries = n
		}
		s.run, s.now = lifecycle.New(cfg), s.epoch
		return "", nil
	case "advance":
		d, err := time.ParseDuration(f[1])
		if err != nil {
			return "", err
		}
		s.now = s.now.Add(d)
		return "", nil
	case "woken":
		if len(f) < 2 {
			return "", fmt.Errorf("woken needs a reason")
		}
		r, err := lifecycle.ParseReason(f[1])
		if err != nil {
			return "", err
		}
		ev = lifecycle.Woken{Reason: r}
	case "attempt-ended":
		if len(f) < 2 {
			return "", fmt.Errorf("attempt-ended needs an outcome")
		}
		o, err := lifecycle.ParseOutcome(f[1])
		if err != nil {
			return "", err
		}
		ev = lifecycle.AttemptEnded{Outcome: o, Reused: flags["reused"], Keepable: flags["keepable"], WaitCallID: args["wait"], Err: args["err"]}
	case "retry-fired":
		ev = lifecycle.RetryFired{}
	case "cancel":
		ev = lifecycle.CancelRequested{}
	case "moved-away":
		ev = lifecycle.MovedAway{}
	case "drain":
		ev = lifecycle.Drain{}
	case "idle-timeout":
		ev = lifecycle.IdleTimeout{}
	case "end-written":
		ev = lifecycle.EndWritten{}
	default:
		return "", fmt.Errorf("unknown command %q", f[0])
	}
	return lifecycle.FormatEffects(s.now, s.run.Step(s.now, ev)), nil
}

// fields splits a line at spaces outside double quotes.
func fields(line string) []string {
	var out []string
	var cur strings.Builder
	quoted := false
	for _, r := range line {
		switch {
		case r == '"':
			quoted = !quoted
			cur.WriteRune(r)
		case r == ' ' && !quoted:
			if cur.Len() > 0 {
				out = append(out, cur.String())
				cur.Reset()
			}
		default:
			cur.WriteRune(r)
		}
	}
	if cur.Len() > 0 {
		out = append(out, cur.String())
	}
	return out
}
