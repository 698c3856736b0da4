package chaos_test

import (
	"slices"
	"testing"
	"time"

	"github.com/cairn-agents/cairn/test/chaos"
)

var topologies = []chaos.Topology{
	{Name: "embedded", Nodes: 1},
	{Name: "external", Nodes: 1, ExternalNATS: true},
	{Name: "cluster", Nodes: 3, MemberTTL: 3 * time.Second},
}

// A seed is a schedule: the same seed gives the same faults, another seed
// others.
func TestPlanIsTheSeeds(t *testing.T) {
	for _, topo := range topologies {
		t.Run(topo.Name, func(t *testing.T) {
			a, b := chaos.Plan(42, topo, 20), chaos.Plan(42, topo, 20)
			if !slices.Equal(a, b) {
				t.Fatalf("seed 42 gave two schedules:\n%v\n%v", a, b)
			}
			if c := chaos.Plan(43, topo, 20); slices.Equal(a, c) {
				t.Fatalf("seeds 42 and 43 gave the same schedule: %v", a)
			}
			if got := chaos.Plan(42, topo, 5); !slices.Equal(got, a[:5]) {
				t.Errorf("a shorter schedule of the same seed is not its prefix: %v, %v", got, a[:5])
			}
		})
	}
}

// Every fault of many schedules fits its topology: a kind it has, a target
// that exists, a hold in its range (a pause outlasts the member TTL).
func TestPlanFitsTheTopology(t *testing.T) {
	for _, topo := range topologies {
		t.Run(topo.Name, func(t *testing.T) {
			seen := map[chaos.Kind]bool{}
			for seed := range int64(200) {
				for _, f := range chaos.Plan(seed, topo, 20) {
					seen[f.Kind] = true
					if !slices.Contains(topo.Kinds(), f.Kind) {
						t.Fatalf("seed %d: %s on a topology without it", seed, f)
					}
					onNATS := f.Kind == chaos.RestartNATS || (f.Kind == chaos.FillDisk && topo.ExternalNATS)
					switch {
					case onNATS && f.Target != chaos.NATS:
						t.Fatalf("seed %d: %s: want the nats-server as target", seed, f)
					case !onNATS && (f.Target < 0 || f.Target >= topo.Nodes):
						t.Fatalf("seed %d: %s: no such node", seed, f)
					}
					if f.Gap < time.Second || f.Gap > 6*time.Second {
						t.Fatalf("seed %d: %s: gap out of range", seed, f)
					}
					if f.Kind == chaos.PauseNode && f.Hold <= topo.MemberTTL {
						t.Fatalf("seed %d: %s: a pause must outlast the member TTL %v", seed, f, topo.MemberTTL)
					}
					if f.Kind == chaos.KillStarting && (f.After <= 0 || f.After > 5*time.Second || topo.Nodes == 1 && f.After > time.Second) {
						t.Fatalf("seed %d: %s: the second kill must come within the start", seed, f)
					}
				}
			}
			for _, k := range topo.Kinds() {
				if !seen[k] {
					t.Errorf("no schedule of 200 seeds has a %s fault", k)
				}
			}
		})
	}
}

func TestTopologyKinds(t *testing.T) {
	tests := []struct {
		name string
		topo chaos.Topology
		want []chaos.Kind
	}{
		{"embedded", topologies[0], []chaos.Kind{chaos.KillNode, chaos.KillStarting, chaos.FillDisk}},
		{"external", topologies[1], []chaos.Kind{chaos.KillNode, chaos.KillStarting, chaos.RestartNATS, chaos.FillDisk}},
		{"cluster", topologies[2], []chaos.Kind{chaos.KillNode, chaos.KillStarting, chaos.PauseNode, chaos.FillDisk}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.topo.Kinds(); !slices.Equal(got, tt.want) {
				t.Errorf("Kinds() = %v, want %v", got, tt.want)
			}
		})
	}
}
