package cluster

import (
	"maps"
	"slices"
	"testing"
)

// A complete read replaces the member list as the watch left it: what the
// watch changed while the read's checks ran wins over the read.
func TestMerged(t *testing.T) {
	e := func(rev uint64) entry { return entry{ID: "x", rev: rev} }
	for _, tc := range []struct {
		name            string
		prev, cur, next map[string]entry
		want            map[string]uint64 // id: revision
	}{
		{"nothing changed meanwhile: the read", map[string]entry{"a": e(1), "b": e(2)}, map[string]entry{"a": e(1), "b": e(2)},
			map[string]entry{"a": e(3)}, map[string]uint64{"a": 3}},
		{"a member joined meanwhile: kept", map[string]entry{"a": e(1)}, map[string]entry{"a": e(1), "y": e(5)},
			map[string]entry{"a": e(1)}, map[string]uint64{"a": 1, "y": 5}},
		{"a member refreshed meanwhile: its newer revision", map[string]entry{"a": e(1)}, map[string]entry{"a": e(4)},
			map[string]entry{"a": e(2)}, map[string]uint64{"a": 4}},
		{"the read newer than the watch: the read", map[string]entry{"a": e(1)}, map[string]entry{"a": e(4)},
			map[string]entry{"a": e(6)}, map[string]uint64{"a": 6}},
		{"a member removed meanwhile: stays out", map[string]entry{"a": e(1), "b": e(2)}, map[string]entry{"a": e(1)},
			map[string]entry{"a": e(1), "b": e(2)}, map[string]uint64{"a": 1}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := map[string]uint64{}
			for id, v := range merged(tc.prev, tc.cur, maps.Clone(tc.next)) {
				got[id] = v.rev
			}
			if !maps.Equal(got, tc.want) {
				t.Fatalf("merged = %v, want %v (ids %v)", got, tc.want, slices.Sorted(maps.Keys(got)))
			}
		})
	}
}
