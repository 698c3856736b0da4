package lifecycle

import (
	"fmt"
	"sort"
	"strings"
	"time"
)

// Transition is one row of the core's transition table: from a state
// (with the flags that change what an event does), an event, the effects
// and the state after.
type Transition struct {
	From    string
	Event   string
	Effects []string
	To      State
}

// situation is a way to reach a state, named as the table prints it.
type situation struct {
	name  string
	state State
	reach []Event
	// reused: the attempt in flight started from a kept handle, and says
	// so when it ends.
	reused bool
}

var situations = []situation{
	{"idle", Idle, nil, false},
	{"running", Running, []Event{Woken{ReasonStarted}}, false},
	{"running, wake owed", Running, []Event{Woken{ReasonStarted}, Woken{ReasonChildFinished}}, false},
	{"running, from a kept handle", Running, []Event{Woken{ReasonStarted}, AttemptEnded{Outcome: Waiting, Keepable: true}, Woken{ReasonChildFinished}}, true},
	{"running, retries spent", Running, retriesSpent(), false},
	{"parked", Parked, []Event{Woken{ReasonStarted}, AttemptEnded{Outcome: Waiting}}, false},
	{"parked, handle kept", Parked, []Event{Woken{ReasonStarted}, AttemptEnded{Outcome: Waiting, Keepable: true}}, false},
	{"backing-off", BackingOff, []Event{Woken{ReasonStarted}, AttemptEnded{Outcome: Transient}}, false},
	{"ending", Ending, []Event{Woken{ReasonStarted}, AttemptEnded{Outcome: Permanent}}, false},
	{"done", Done, []Event{Woken{ReasonStarted}, AttemptEnded{Outcome: Completed}}, false},
}

func retriesSpent() []Event {
	evs := []Event{Woken{ReasonStarted}}
	for range New(Config{}).cfg.MaxRetries {
		evs = append(evs, AttemptEnded{Outcome: Transient}, RetryFired{})
	}
	return evs
}

// tableEvents are the events the table applies in every situation.
func tableEvents() []Event {
	evs := []Event{Woken{ReasonChildFinished}, RetryFired{}}
	for o := range Outcome(len(outcomeNames)) {
		evs = append(evs, AttemptEnded{Outcome: o})
	}
	return append(evs, CancelRequested{}, MovedAway{}, Drain{}, IdleTimeout{}, EndWritten{})
}

// Table steps the core from every situation with every event.
func Table() []Transition {
	var out []Transition
	t0 := time.Unix(0, 0)
	for _, s := range situations {
		for _, ev := range tableEvents() {
			r := New(Config{})
			for _, e := range s.reach {
				r.Step(t0, e)
			}
			if r.State() != s.state {
				panic(fmt.Sprintf("lifecycle: table situation %q reaches %s", s.name, r.State()))
			}
			if e, ok := ev.(AttemptEnded); ok && s.reused {
				e.Reused = true
				ev = e
			}
			effs := r.Step(t0, ev)
			names := make([]string, len(effs))
			for i, e := range effs {
				names[i] = EffectName(e)
			}
			out = append(out, Transition{From: s.name, Event: fmt.Sprint(ev), Effects: names, To: r.State()})
		}
	}
	return out
}

// Mermaid draws the table as a Mermaid state diagram: one arrow per pair of
// states, labelled with the events that take it (and their effects).
// Events that change nothing are left out.
func Mermaid() string {
	type edge struct{ from, to State }
	labels := map[edge][]string{}
	table := Table()
	base := map[string]Transition{} // the plain situation of a state, by event
	for _, t := range table {
		if t.From == stateOf(t.From).String() {
			base[t.From+"|"+t.Event] = t
		}
	}
	for _, t := range table {
		from := stateOf(t.From)
		if from == t.To && len(t.Effects) == 0 {
			continue
		}
		// A situation with flags (a wake owed, a handle kept) is drawn only
		// where it does something the plain state does not.
		if b, ok := base[from.String()+"|"+strings.TrimSuffix(t.Event, " reused")]; ok && t.From != b.From && b.To == t.To && strings.Join(b.Effects, ",") == strings.Join(t.Effects, ",") {
			continue
		}
		label := t.Event
		if len(t.Effects) > 0 {
			label += " / " + strings.Join(t.Effects, ", ")
		}
		if t.From != from.String() {
			label = "(" + strings.TrimPrefix(t.From, from.String()+", ") + ") " + label
		}
		e := edge{from, t.To}
		if !contains(labels[e], label) {
			labels[e] = append(labels[e], label)
		}
	}
	edges := make([]edge, 0, len(labels))
	for e := range labels {
		edges = append(edges, e)
	}
	sort.Slice(edges, func(i, j int) bool {
		if edges[i].from != edges[j].from {
			return edges[i].from < edges[j].from
		}
		return edges[i].to < edges[j].to
	})
	var b strings.Builder
	b.WriteString("stateDiagram-v2\n")
	b.WriteString("    [*] --> idle\n")
	for _, e := range edges {
		fmt.Fprintf(&b, "    %s --> %s: %s\n", id(e.from), id(e.to), strings.Join(labels[e], "<br/>"))
	}
	b.WriteString("    done --> [*]\n")
	return b.String()
}

// Markdown writes the table as a Markdown table.
func Markdown() string {
	var b strings.Builder
	b.WriteString("| from | event | effects | to |\n|---|---|---|---|\n")
	for _, t := range Table() {
		effs := strings.Join(t.Effects, ", ")
		if effs == "" {
			effs = "none"
		}
		fmt.Fprintf(&b, "| %s | %s | %s | %s |\n", t.From, t.Event, effs, t.To)
	}
	return b.String()
}

func id(s State) string { return strings.ReplaceAll(s.String(), "-", "_") }

func stateOf(situationName string) State {
	for _, s := range situations {
		if s.name == situationName {
			return s.state
		}
	}
	panic("lifecycle: unknown situation " + situationName)
}

func contains(xs []string, x string) bool {
	for _, y := range xs {
		if y == x {
			return true
		}
	}
	return false
}
