package sweep_test

import (
	"fmt"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/cairn-agents/cairn/actors/sweep"
	"github.com/cairn-agents/cairn/internal/scripttest"
)

// TestScripts runs testdata/*.txt. Commands:
//
//	members a b c        the topology (member IDs; addresses are id:1)
//	self a               this member
//	run r1 [local] [lease=b@-10s] [created=-5s] [created=unknown] [created=none]
//	                     an active run this member owns, with times relative to now
//	sweep [first] [full] [interval=30s] [grace=15s]
//	                     prints the runs woken
func TestScripts(t *testing.T) {
	scripttest.Run(t, "testdata/*.txt", func() scripttest.Handler {
		s := &state{runs: map[string]sweep.Run{}}
		return s.do
	})
}

type state struct {
	self    string
	members []string
	runs    map[string]sweep.Run
}

var now = time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)

func (s *state) do(t *testing.T, c *scripttest.Case) string {
	var out strings.Builder
	for _, line := range c.Input {
		f := strings.Fields(line)
		switch f[0] {
		case "members":
			s.members = f[1:]
		case "self":
			s.self = f[1]
		case "forget":
			s.runs = map[string]sweep.Run{}
		case "run":
			var r sweep.Run
			for _, a := range f[2:] {
				k, v, _ := strings.Cut(a, "=")
				switch k {
				case "local":
					r.Local = true
				case "lease":
					holder, at, _ := strings.Cut(v, "@")
					d, err := time.ParseDuration(at)
					if err != nil {
						t.Fatalf("%s: %v", c.Pos, err)
					}
					r.Lease = &sweep.Lease{Holder: holder, At: now.Add(d)}
				case "created":
					if v == "unknown" {
						r.CreatedUnknown = true
						continue
					}
					if v == "none" {
						r.NoRecord = true
						continue
					}
					d, err := time.ParseDuration(v)
					if err != nil {
						t.Fatalf("%s: %v", c.Pos, err)
					}
					r.Created = now.Add(d)
				default:
					t.Fatalf("%s: unknown run attribute %q", c.Pos, a)
				}
			}
			s.runs[f[1]] = r
		case "sweep":
			sw := sweep.Sweep{Self: s.self, Live: map[string]bool{}, Now: now, Interval: 30 * time.Second, UnleasedGrace: 15 * time.Second}
			for _, m := range s.members {
				sw.Live[m] = true
			}
			for _, a := range f[1:] {
				k, v, _ := strings.Cut(a, "=")
				switch k {
				case "first":
					sw.First = true
				case "full":
					sw.Full = true
				case "interval":
					sw.Interval, _ = time.ParseDuration(v)
				default:
					t.Fatalf("%s: unknown sweep attribute %q", c.Pos, a)
				}
			}
			names := make([]string, 0, len(s.runs))
			for n := range s.runs {
				names = append(names, n)
			}
			sort.Strings(names)
			var woken, read, settled []string
			for _, n := range names {
				r := s.runs[n]
				v := sw.Decide(r, false)
				if v == sweep.NeedLease {
					read = append(read, n)
					v = sw.Decide(r, true)
				}
				switch v {
				case sweep.Wake:
					woken = append(woken, n)
				case sweep.Settle:
					settled = append(settled, n)
				}
			}
			fmt.Fprintf(&out, "leases read: %s\nwoken: %s\nsettled: %s\n", list(read), list(woken), list(settled))
		default:
			t.Fatalf("%s: unknown command %q", c.Pos, f[0])
		}
	}
	return out.String()
}

func list(xs []string) string {
	if len(xs) == 0 {
		return "none"
	}
	return strings.Join(xs, " ")
}

// TestPlacement: one member owns everything; with several, each identity
// has exactly one owner, and removing a member moves only its own
// identities (rendezvous hashing's promise, which handoffs rely on).
func TestPlacement(t *testing.T) {
	if got := sweep.Place(nil).Owner("x"); got != "" {
		t.Fatalf("no member: owner %q", got)
	}
	if got := sweep.Place([]sweep.Member{{ID: "a", Addr: "a:1"}}).Owner("x"); got != "a:1" {
		t.Fatalf("one member: owner %q", got)
	}
	three := sweep.Place([]sweep.Member{{ID: "a", Addr: "a:1"}, {ID: "b", Addr: "b:1"}, {ID: "c", Addr: "c:1"}})
	two := sweep.Place([]sweep.Member{{ID: "a", Addr: "a:1"}, {ID: "b", Addr: "b:1"}})
	counts := map[string]int{}
	for i := range 3000 {
		id := fmt.Sprintf("s%d.r%d", i, i)
		o3, o2 := three.Owner(id), two.Owner(id)
		counts[o3]++
		if o3 != "c:1" && o3 != o2 {
			t.Fatalf("%s moved from %s to %s when c left", id, o3, o2)
		}
	}
	for _, a := range []string{"a:1", "b:1", "c:1"} {
		if counts[a] < 100 { // FNV rendezvous is far from even on short addresses; each member must own some
			t.Errorf("member %s owns %d of 3000 identities: %v", a, counts[a], counts)
		}
	}
}
