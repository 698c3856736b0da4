// Package retention purges the sessions whose retention ran out. What to
// purge is decided by Decide, a pure function of what the log holds of a
// session, the policy and the time, where a table test drives every case;
// the Sweeper reads the sessions, performs the purges and cleans up after
// them.
//
// A session is purged whole: its runs, their commits, leases and
// compactions, its out-of-line payloads and its runs' entries in the
// node's buckets. It is purged only when no continuation can follow any
// more but the one the purge itself refuses: every run of it has ended,
// its last event is older than its agent's retention, and, for a child's
// session, the parent run (the only run that may continue it) has ended
// too. The purge is fenced on the session's last sequence, so a
// continuation admitted meanwhile wins and the session is kept; and it
// writes its marker first, so what was purged stays in the log and a
// purge stopped half way is finished by the next sweep.
package retention

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/cairn-agents/cairn/events"
)

// Policy is how long a finished session is kept after its last event.
type Policy struct {
	// Default applies to every agent without an override; 0 keeps
	// sessions forever.
	Default time.Duration
	// Agents overrides Default by agent slug; 0 keeps that agent's
	// sessions forever.
	Agents map[string]time.Duration
}

// For is agent's retention: 0 when its sessions are kept forever.
func (p Policy) For(agent string) time.Duration {
	if d, ok := p.Agents[agent]; ok {
		return d
	}
	return p.Default
}

// Shortest is the shortest retention of any agent; 0 when every session
// is kept forever.
func (p Policy) Shortest() time.Duration {
	least := p.Default
	for _, d := range p.Agents {
		if d > 0 && (least == 0 || d < least) {
			least = d
		}
	}
	return least
}

// ParseDuration reads a retention: Go's durations ("36h", "90m") and days
// ("30d"); "0" or "forever" keep sessions forever.
func ParseDuration(s string) (time.Duration, error) {
	switch s = strings.TrimSpace(s); s {
	case "0", "forever":
		return 0, nil
	case "":
		return 0, fmt.Errorf("retention: empty; give a duration such as 30d or 12h, or forever")
	}
	var d time.Duration
	if days, ok := strings.CutSuffix(s, "d"); ok {
		n, err := strconv.ParseFloat(days, 64)
		if err != nil || n <= 0 || n > 100*365 {
			return 0, fmt.Errorf("retention %q: want a positive number of days (at most 100 years)", s)
		}
		d = time.Duration(n * float64(24*time.Hour))
	} else {
		var err error
		if d, err = time.ParseDuration(s); err != nil {
			return 0, fmt.Errorf("retention %q: want a duration such as 30d, 12h or 90m, or forever", s)
		}
	}
	if d <= 0 {
		return 0, fmt.Errorf("retention %q: must be positive (or forever)", s)
	}
	return d, nil
}

// Session is what a sweep knows of one session: what the log holds of it
// and whether the run that may continue it, for a child's session, ended.
type Session struct {
	ID string
	// Runs are the session's runs; a run's Status is empty while it has
	// not ended.
	Runs []events.PurgedRun
	// LastTime is the time of the session's last event.
	LastTime time.Time
	// Purged: the session's purge marker is in the log.
	Purged bool
	// ParentEnded: the parent run of the session's runs has ended (set by
	// the Sweeper for a child's session only).
	ParentEnded bool
}

// Action is what Decide says to do with a session.
type Action int

const (
	// Keep the session.
	Keep Action = iota
	// Purge the session: write its marker, then remove the rest.
	Purge
	// Finish a purge whose marker is written: remove what is below it.
	Finish
)

func (a Action) String() string {
	switch a {
	case Keep:
		return "keep"
	case Purge:
		return "purge"
	case Finish:
		return "finish"
	}
	return "Action(" + strconv.Itoa(int(a)) + ")"
}

// Verdict is Decide's answer.
type Verdict struct {
	Action Action
	// Why says why, for a log line.
	Why string
	// Retention is the session's agent's retention; Due is when the
	// session may be purged (zero when it is kept forever or not ended).
	Retention time.Duration
	Due       time.Time
}

// Decide says what to do with session s at now under policy p.
func Decide(s Session, p Policy, now time.Time) Verdict {
	if s.Purged {
		return Verdict{Action: Finish, Why: "purged; removing what is left below its marker"}
	}
	if len(s.Runs) == 0 {
		return Verdict{Action: Keep, Why: "no run record"}
	}
	agent := s.Runs[0].Agent
	for _, r := range s.Runs {
		if r.Agent == "" {
			// Created events come first in a session; an end without its
			// record is a log this decision does not understand.
			return Verdict{Action: Keep, Why: "run " + r.RunID + " has no record"}
		}
		if r.Status == "" {
			return Verdict{Action: Keep, Why: "run " + r.RunID + " has not ended"}
		}
	}
	ret := p.For(agent)
	if ret == 0 {
		return Verdict{Action: Keep, Why: "agent " + agent + " keeps its sessions forever"}
	}
	due := s.LastTime.Add(ret)
	if now.Before(due) {
		return Verdict{Action: Keep, Why: "retention " + ret.String() + " runs until " + due.UTC().Format(time.RFC3339), Retention: ret, Due: due}
	}
	if parent := s.Runs[len(s.Runs)-1].ParentRunID; parent != "" && !s.ParentEnded {
		return Verdict{Action: Keep, Why: "parent run " + parent + " has not ended: it may continue the session", Retention: ret, Due: due}
	}
	return Verdict{Action: Purge, Why: "every run ended; retention " + ret.String() + " ran out", Retention: ret, Due: due}
}
