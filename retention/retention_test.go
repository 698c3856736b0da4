package retention

import (
	"strings"
	"testing"
	"time"

	"github.com/cairn-agents/cairn/events"
)

func TestParseDuration(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want time.Duration
		err  string
	}{
		{"30d", 30 * 24 * time.Hour, ""},
		{"0.5d", 12 * time.Hour, ""},
		{"12h", 12 * time.Hour, ""},
		{"90m", 90 * time.Minute, ""},
		{" 1s ", time.Second, ""},
		{"forever", 0, ""},
		{"0", 0, ""},
		{"", 0, "empty"},
		{"-1h", 0, "must be positive"},
		{"0s", 0, "must be positive"},
		{"-2d", 0, "positive number of days"},
		{"xd", 0, "positive number of days"},
		{"100000d", 0, "at most 100 years"},
		{"a week", 0, "want a duration"},
	} {
		got, err := ParseDuration(tc.in)
		if tc.err == "" && (err != nil || got != tc.want) {
			t.Errorf("ParseDuration(%q) = %v, %v; want %v", tc.in, got, err, tc.want)
		}
		if tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)) {
			t.Errorf("ParseDuration(%q) = %v, %v; want an error saying %q", tc.in, got, err, tc.err)
		}
	}
}

func TestPolicy(t *testing.T) {
	p := Policy{Default: 30 * 24 * time.Hour, Agents: map[string]time.Duration{"short": time.Hour, "kept": 0}}
	for agent, want := range map[string]time.Duration{"short": time.Hour, "kept": 0, "other": 30 * 24 * time.Hour} {
		if got := p.For(agent); got != want {
			t.Errorf("For(%q) = %v, want %v", agent, got, want)
		}
	}
	if got := p.Shortest(); got != time.Hour {
		t.Errorf("Shortest = %v, want 1h", got)
	}
	if got := (Policy{Agents: map[string]time.Duration{"a": 2 * time.Hour, "b": 0}}).Shortest(); got != 2*time.Hour {
		t.Errorf("Shortest with only an override = %v, want 2h", got)
	}
	if got := (Policy{}).Shortest(); got != 0 {
		t.Errorf("Shortest of nothing = %v, want 0 (kept forever)", got)
	}
}

func TestDecide(t *testing.T) {
	t0 := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	day := 24 * time.Hour
	p := Policy{Default: 30 * day, Agents: map[string]time.Duration{"kept": 0, "brief": time.Hour}}
	ended := func(id, agent string) events.PurgedRun {
		return events.PurgedRun{RunID: id, Agent: agent, Status: "completed", Ended: t0}
	}
	child := func(id string) events.PurgedRun {
		r := ended(id, "a")
		r.ParentRunID, r.ParentSessionID = "p1", "ps"
		return r
	}
	running := events.PurgedRun{RunID: "r2", Agent: "a"}
	for _, tc := range []struct {
		name string
		s    Session
		now  time.Time
		want Action
		why  string
	}{
		{"due", Session{Runs: []events.PurgedRun{ended("r1", "a")}, LastTime: t0}, t0.Add(30 * day), Purge, "ran out"},
		{"not yet due", Session{Runs: []events.PurgedRun{ended("r1", "a")}, LastTime: t0}, t0.Add(30*day - time.Nanosecond), Keep, "runs until"},
		{"a run not ended", Session{Runs: []events.PurgedRun{ended("r1", "a"), running}, LastTime: t0}, t0.Add(365 * day), Keep, "r2 has not ended"},
		{"kept forever", Session{Runs: []events.PurgedRun{ended("r1", "kept")}, LastTime: t0}, t0.Add(10000 * day), Keep, "forever"},
		{"an agent's own", Session{Runs: []events.PurgedRun{ended("r1", "brief")}, LastTime: t0}, t0.Add(time.Hour), Purge, "1h0m0s"},
		{"from the last event, not the last end", Session{Runs: []events.PurgedRun{ended("r1", "brief")}, LastTime: t0.Add(time.Hour)}, t0.Add(90 * time.Minute), Keep, "runs until"},
		{"a child's, parent running", Session{Runs: []events.PurgedRun{child("c1")}, LastTime: t0}, t0.Add(31 * day), Keep, "parent run p1"},
		{"a child's, parent ended", Session{Runs: []events.PurgedRun{child("c1")}, LastTime: t0, ParentEnded: true}, t0.Add(31 * day), Purge, ""},
		{"no record", Session{Runs: []events.PurgedRun{{RunID: "r1", Status: "failed"}}, LastTime: t0}, t0.Add(31 * day), Keep, "no record"},
		{"no run", Session{LastTime: t0}, t0.Add(31 * day), Keep, "no run"},
		{"purged", Session{Runs: []events.PurgedRun{ended("r1", "a")}, Purged: true}, t0, Finish, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v := Decide(tc.s, p, tc.now)
			if v.Action != tc.want || !strings.Contains(v.Why, tc.why) {
				t.Errorf("Decide = %v (%s); want %v saying %q", v.Action, v.Why, tc.want, tc.why)
			}
		})
	}
}
