package events

import (
	"bufio"
	"bytes"
	"encoding"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"go/parser"
	"go/token"
	"maps"
	"math/rand/v2"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"
	"text/tabwriter"
	"time"

	"github.com/cairn-agents/cairn/events/wire"
	"github.com/cairn-agents/cairn/runtime"
	"github.com/cairn-agents/cairn/runtime/model"
	"github.com/cairn-agents/cairn/runtime/session"
)

var update = flag.Bool("update", false, "write testdata/wire-schema.golden from the schema (TestWireSchema)")

// changeAdvice is what a test says when the runtime's JSON or the wire
// types would change the log.
const changeAdvice = "the log's form is package events/wire's: for a change a reader of an earlier version would misread " +
	"(anything but a field added with omitempty), bump events.SchemaVersion and add an upcaster (events/schema.go) " +
	"with the new version's wire types; otherwise keep the runtime field's JSON as events/wire spells it"

// Every version from 1 to SchemaVersion has a reader and names a payload
// for every type it defines; a version above is ErrUnknownVersion and
// one below 1 ErrMalformed.
func TestEveryVersionHasAReader(t *testing.T) {
	for v := 1; v <= SchemaVersion; v++ {
		ver, err := versionOf(v)
		if err != nil {
			t.Fatalf("version %d: %v", v, err)
		}
		if ver.commit == nil || ver.payloads[CheckpointCommitted] == nil {
			t.Fatalf("version %d has no commit reader or payload", v)
		}
		for typ := range known {
			if _, ok := ver.payloads[typ]; !ok && v == SchemaVersion {
				t.Errorf("version %d names no payload for %s (nil for a reserved type)", v, typ)
			}
		}
	}
	for v, want := range map[int]error{SchemaVersion + 1: ErrUnknownVersion, 99: ErrUnknownVersion, 0: ErrMalformed, -1: ErrMalformed} {
		if _, err := versionOf(v); !errors.Is(err, want) {
			t.Errorf("versionOf(%d) = %v, want %v", v, err, want)
		}
		e := Envelope{Type: CheckpointCommitted, Version: v, SessionID: "s", Data: json.RawMessage(`{"checkpoint":{}}`)}
		var p Checkpoint
		if err := e.Payload(&p); !errors.Is(err, want) {
			t.Errorf("Payload of version %d = %v, want %v", v, err, want)
		}
	}
}

// The upcaster from version 1 keeps every field version 1 has and names
// no call listing: a version 1 commit's calls are the whole journal.
func TestUpcastCommit1(t *testing.T) {
	calls := []runtime.CallRecord{{ID: "a", Name: "run_js", Args: "{}", State: runtime.CallDone, ResultID: "k-3-0"}}
	for _, tc := range []struct {
		name string
		in   commitV1
		want Checkpoint
	}{
		{"empty", commitV1{}, Checkpoint{}},
		{"whole", commitV1{Checkpoint: runtime.Checkpoint{Revision: 3, Calls: calls, UsedCallIDs: []string{"a"}}},
			Checkpoint{Checkpoint: runtime.Checkpoint{Revision: 3, Calls: calls, UsedCallIDs: []string{"a"}}}},
		{"on a used-ID base", commitV1{Checkpoint: runtime.Checkpoint{Revision: 5, UsedCallIDs: []string{"b"}}, UsedCallIDsBase: 9, UsedCallIDsBaseRev: 2},
			Checkpoint{Checkpoint: runtime.Checkpoint{Revision: 5, UsedCallIDs: []string{"b"}}, UsedCallIDsBase: 9, UsedCallIDsBaseRev: 2}},
		// Version 2's fields are not version 1's: whatever they held, a
		// version 1 commit names no listing.
		{"later versions' fields", commitV1{Checkpoint: runtime.Checkpoint{Revision: 5, Calls: calls}, CallsBase: 4, CallsBaseRev: 2, CallsAt: []int{0}},
			Checkpoint{Checkpoint: runtime.Checkpoint{Revision: 5, Calls: calls}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := *upcastCommit1(&tc.in)
			if !reflect.DeepEqual(got, tc.want) || !got.ListsCalls() {
				t.Fatalf("upcast\n got %+v\nwant %+v", got, tc.want)
			}
		})
	}
	// With every field set, the upcast writes what version 1 wrote: a
	// field of version 1 not carried over fails here.
	var v1 commitV1
	(&filler{}).fill(reflect.ValueOf(&v1).Elem())
	a, _ := json.Marshal(&v1)
	b, _ := json.Marshal(upcastCommit1(&v1))
	if !bytes.Equal(a, b) {
		t.Fatalf("a version 1 commit with every field set, upcast:\n%s\nagainst\n%s", b, a)
	}
}

// Hand-written commits of each version read, through the version's reader
// and upcasters, into this build's form.
func TestReadCommitOfEachVersion(t *testing.T) {
	call := func(id, args string, st runtime.CallState, result string) runtime.CallRecord {
		return runtime.CallRecord{ID: id, Name: "run_js", Args: args, State: st, ResultID: result}
	}
	at := time.Date(2026, 11, 30, 0, 0, 0, 5, time.UTC)
	full := runtime.Checkpoint{Version: 1, ContractHash: "h", Revision: 4, RunKey: "k", Phase: runtime.PhaseCalls, Step: 2, ResponseID: "k-3-0",
		Calls:       []runtime.CallRecord{call("c1", `{"code":"return 1"}`, runtime.CallDone, "k-4-0"), call("c2", `{"code":"x"}`, runtime.CallDispatching, "")},
		UsedCallIDs: []string{"c1", "c2"}, Reply: &runtime.Reply{Type: runtime.ReplyOutput, Output: json.RawMessage(`{"n":1.50}`)},
		Append: []model.Message{{ID: "k-4-0", Role: model.RoleTool, Parts: []model.Part{{Type: model.PartToolResult,
			ToolResult: &model.ToolResult{CallID: "c1", Name: "run_js", Content: "1", Attachments: []model.Attachment{{Ref: "obj/1", Size: 3}}}}},
			Meta: map[string][]byte{"m": []byte("v")}}},
		Usage:         &model.Usage{InputTokens: 10, OutputTokens: 5},
		ModelFailures: []model.Failure{{Provider: "openai", Attempt: 1, Status: 503, Class: "status", Error: "busy", Retry: true, RetryIn: time.Second, At: at}},
	}
	// fullJSON is full as every version spells it: the checkpoint's
	// fields are the same in versions 1 to 3.
	fullJSON := `{"version":1,"contract_hash":"h","revision":4,"run_key":"k","phase":"calls","step":2,"response_id":"k-3-0",` +
		`"calls":[{"id":"c1","name":"run_js","args":"{\"code\":\"return 1\"}","state":"done","result_id":"k-4-0"},{"id":"c2","name":"run_js","args":"{\"code\":\"x\"}","state":"dispatching"}],` +
		`"used_call_ids":["c1","c2"],"reply":{"type":"output","output":{"n":1.50}},` +
		`"append":[{"id":"k-4-0","role":"tool","parts":[{"type":"tool_result","tool_result":{"call_id":"c1","name":"run_js","content":"1","attachments":[{"ref":"obj/1","size":3}]}}],"meta":{"m":"dg=="}}],` +
		`"usage":{"input_tokens":10,"output_tokens":5},` +
		`"model_failures":[{"provider":"openai","attempt":1,"status":503,"class":"status","error":"busy","retry":true,"retry_in":1000000000,"at":"2026-11-30T00:00:00.000000005Z"}]}`
	changed := runtime.Checkpoint{Revision: 5, Calls: []runtime.CallRecord{{ID: "c2", Name: "run_js", State: runtime.CallDone, ResultID: "k-5-0"}}}
	changedJSON := `{"revision":5,"calls":[{"id":"c2","name":"run_js","state":"done","result_id":"k-5-0"}]}`
	for _, tc := range []struct {
		name    string
		version int
		data    string
		want    Checkpoint
	}{
		{"v1 whole", 1, `{"checkpoint":` + fullJSON + `}`, Checkpoint{Checkpoint: full}},
		{"v1 on a used-ID base", 1, `{"checkpoint":` + fullJSON + `,"used_call_ids_base":7,"used_call_ids_base_rev":2}`,
			Checkpoint{Checkpoint: full, UsedCallIDsBase: 7, UsedCallIDsBaseRev: 2}},
		// Version 1 had no call changes: keys of version 2 in a version 1
		// payload are not read, as a version 1 build did not read them.
		{"v1 with version 2's keys", 1, `{"checkpoint":` + changedJSON + `,"calls_base":3,"calls_base_rev":4,"calls_at":[1]}`,
			Checkpoint{Checkpoint: changed}},
		// The first builds of version 1 journaled a finished call's result
		// message whole: the call reads without it.
		{"v1 of an early build", 1, `{"checkpoint":{"revision":3,"calls":[{"id":"c1","name":"run_js","args":"{}","state":"done","result":{"id":"k-3-0","role":"tool","parts":[]}}]}}`,
			Checkpoint{Checkpoint: runtime.Checkpoint{Revision: 3, Calls: []runtime.CallRecord{call("c1", "{}", runtime.CallDone, "")}}}},
		{"v2 whole", 2, `{"checkpoint":` + fullJSON + `}`, Checkpoint{Checkpoint: full}},
		{"v2 changes on a listing", 2, `{"checkpoint":` + changedJSON + `,"used_call_ids_base":7,"used_call_ids_base_rev":2,"calls_base":3,"calls_base_rev":4,"calls_at":[1]}`,
			Checkpoint{Checkpoint: changed, UsedCallIDsBase: 7, UsedCallIDsBaseRev: 2, CallsBase: 3, CallsBaseRev: 4, CallsAt: []int{1}}},
		{"v2 changes without a sequence", 2, `{"checkpoint":` + changedJSON + `,"calls_base_rev":4,"calls_at":[1]}`,
			Checkpoint{Checkpoint: changed, CallsBaseRev: 4, CallsAt: []int{1}}},
		{"v3 reads as v2", 3, `{"checkpoint":` + changedJSON + `,"calls_base":3,"calls_base_rev":4,"calls_at":[1]}`,
			Checkpoint{Checkpoint: changed, CallsBase: 3, CallsBaseRev: 4, CallsAt: []int{1}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.version > SchemaVersion {
				t.Skipf("this build reads up to version %d", SchemaVersion)
			}
			e := Envelope{Type: CheckpointCommitted, Version: tc.version, SessionID: "s", RunID: "r", Data: json.RawMessage(tc.data)}
			// A reused value is overwritten, not merged into.
			got := Checkpoint{CallsBaseRev: 99, CallsAt: []int{9}, Checkpoint: runtime.Checkpoint{RunKey: "stale"}}
			if err := e.Payload(&got); err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("version %d:\n got %+v\nwant %+v", tc.version, got, tc.want)
			}
		})
	}
}

// A payload that is not JSON of its version's form is ErrMalformed
// whatever the version.
func TestReadCommitRefusesMalformed(t *testing.T) {
	for v := 1; v <= SchemaVersion; v++ {
		for _, data := range []string{`{"checkpoint":7}`, `{"checkpoint":{"calls":{}}}`, `{"used_call_ids_base":-1}`, `[`} {
			e := Envelope{Type: CheckpointCommitted, Version: v, SessionID: "s", Data: json.RawMessage(data)}
			var p Checkpoint
			if err := e.Payload(&p); !errors.Is(err, ErrMalformed) {
				t.Errorf("version %d, %s: %v, want ErrMalformed", v, data, err)
			}
		}
	}
}

// jsonField is one field of a struct as encoding/json writes it.
type jsonField struct {
	goName, name, opts string
	typ                reflect.Type
}

// jsonFields lists t's fields as encoding/json writes them, in order.
// An embedded field is refused: encoding/json flattens it, so the log's
// form would be another type's.
func jsonFields(t reflect.Type) ([]jsonField, error) {
	var out []jsonField
	for i := range t.NumField() {
		f := t.Field(i)
		tag := f.Tag.Get("json")
		if f.Anonymous {
			return nil, fmt.Errorf("%s embeds %s: name every field of the log", t, f.Type)
		}
		if tag == "-" || !f.IsExported() {
			continue
		}
		name, opts, _ := strings.Cut(tag, ",")
		if name == "" {
			name = f.Name
		}
		out = append(out, jsonField{goName: f.Name, name: name, opts: opts, typ: f.Type})
	}
	return out, nil
}

var (
	marshaler       = reflect.TypeFor[json.Marshaler]()
	unmarshaler     = reflect.TypeFor[json.Unmarshaler]()
	textMarshaler   = reflect.TypeFor[encoding.TextMarshaler]()
	textUnmarshaler = reflect.TypeFor[encoding.TextUnmarshaler]()
)

// ownJSON reports whether t (or *t) encodes or decodes itself.
func ownJSON(t reflect.Type) bool {
	for _, i := range []reflect.Type{marshaler, unmarshaler, textMarshaler, textUnmarshaler} {
		if t.Implements(i) || reflect.PointerTo(t).Implements(i) {
			return true
		}
	}
	return false
}

// comparer compares an in-memory form with its wire type as
// encoding/json writes and reads them, field by field.
type comparer struct {
	seen map[[2]reflect.Type]bool
	// dropped are the wire fields the in-memory form may lack (it does
	// not read them), by path; used marks those met.
	dropped map[string]string
	used    map[string]bool
}

// sameJSON lists how a and b differ, each difference with its path from
// the root.
func sameJSON(a, b reflect.Type, path string, dropped map[string]string) []string {
	c := &comparer{seen: map[[2]reflect.Type]bool{}, dropped: dropped, used: map[string]bool{}}
	diffs := c.same(a, b, path)
	for p := range dropped {
		if !c.used[p] {
			diffs = append(diffs, fmt.Sprintf("%s: allowed to be dropped, but no such wire field is met", p))
		}
	}
	return diffs
}

func (c *comparer) same(a, b reflect.Type, path string) []string {
	if a == b || c.seen[[2]reflect.Type{a, b}] {
		return nil
	}
	c.seen[[2]reflect.Type{a, b}] = true
	switch {
	case ownJSON(a) || ownJSON(b):
		return []string{fmt.Sprintf("%s: %s against wire %s: a type with its own JSON must be the same type on both sides", path, a, b)}
	case a.Kind() != b.Kind():
		return []string{fmt.Sprintf("%s: %s (%s) against wire %s (%s)", path, a, a.Kind(), b, b.Kind())}
	}
	switch a.Kind() {
	case reflect.Pointer:
		return c.same(a.Elem(), b.Elem(), path)
	case reflect.Slice:
		return c.same(a.Elem(), b.Elem(), path+"[]")
	case reflect.Array:
		if a.Len() != b.Len() {
			return []string{fmt.Sprintf("%s: %s against wire %s", path, a, b)}
		}
		return c.same(a.Elem(), b.Elem(), path+"[]")
	case reflect.Map:
		return append(c.same(a.Key(), b.Key(), path+"{key}"), c.same(a.Elem(), b.Elem(), path+"{}")...)
	case reflect.Interface:
		return []string{fmt.Sprintf("%s: %s against wire %s: the log holds no interfaces", path, a, b)}
	case reflect.Struct:
	default:
		return nil // the same basic kind encodes alike
	}
	fa, err := jsonFields(a)
	if err != nil {
		return []string{fmt.Sprintf("%s: %v", path, err)}
	}
	fb, err := jsonFields(b)
	if err != nil {
		return []string{fmt.Sprintf("%s: %v", path, err)}
	}
	var diffs []string
	in := func(fs []jsonField, name string) int {
		return slices.IndexFunc(fs, func(f jsonField) bool { return f.name == name })
	}
	for _, f := range fa {
		if in(fb, f.name) < 0 {
			diffs = append(diffs, fmt.Sprintf("%s.%s: %s.%s has no field in wire %s", path, f.name, a, f.goName, b))
		}
	}
	fb = slices.DeleteFunc(slices.Clone(fb), func(f jsonField) bool {
		if in(fa, f.name) >= 0 {
			return false
		}
		if _, ok := c.dropped[path+"."+f.name]; ok {
			c.used[path+"."+f.name] = true
			return true
		}
		diffs = append(diffs, fmt.Sprintf("%s.%s: wire %s.%s has no field in %s", path, f.name, b, f.goName, a))
		return false
	})
	if diffs != nil {
		return diffs
	}
	for i, f := range fa {
		g := fb[i]
		switch {
		case f.name != g.name:
			diffs = append(diffs, fmt.Sprintf("%s: field %d is %q in %s, %q in wire %s (encoding/json writes fields in order)", path, i, f.name, a, g.name, b))
		case f.opts != g.opts:
			diffs = append(diffs, fmt.Sprintf("%s.%s: %s.%s has options %q, wire %s.%s %q", path, f.name, a, f.goName, f.opts, b, g.goName, g.opts))
		default:
			diffs = append(diffs, c.same(f.typ, g.typ, path+"."+f.name)...)
		}
	}
	return diffs
}

// inMemory pairs each form this build decodes the log into, or encodes
// it from, with its wire type.
var inMemory = []struct {
	mem, wire reflect.Type
	// dropped are the wire fields mem does not read, by path, each with
	// why; clear zeroes them in a wire value.
	dropped map[string]string
	clear   func(wire any)
}{
	{mem: reflect.TypeFor[Checkpoint](), wire: reflect.TypeFor[wire.Commit]()},
	{mem: reflect.TypeFor[runtime.Checkpoint](), wire: reflect.TypeFor[wire.Checkpoint]()},
	{mem: reflect.TypeFor[Compaction](), wire: reflect.TypeFor[wire.Compacted]()},
	{mem: reflect.TypeFor[session.Compaction](), wire: reflect.TypeFor[wire.Compaction]()},
	{mem: reflect.TypeFor[model.Message](), wire: reflect.TypeFor[wire.Message]()},
	{mem: reflect.TypeFor[commitV1](), wire: reflect.TypeFor[wire.CommitV1](),
		dropped: map[string]string{"events.commitV1.checkpoint.calls[].result": "an early version 1 build's result message, read without it (readCommitV1)"},
		clear: func(w any) {
			for i := range w.(*wire.CommitV1).Checkpoint.Calls {
				w.(*wire.CommitV1).Checkpoint.Calls[i].Result = nil
			}
		}},
}

// The runtime's structs, which the commit path encodes as they are,
// encode exactly as the wire types: the same fields in the same order
// with the same JSON names, options and kinds, checked field by field
// and then over a value with every field set, both ways.
func TestRuntimeEncodesAsWire(t *testing.T) {
	for _, p := range inMemory {
		for _, d := range sameJSON(p.mem, p.wire, p.mem.String(), p.dropped) {
			t.Errorf("%s\n%s", d, changeAdvice)
		}
		if t.Failed() {
			continue
		}
		checkBothWays(t, &filler{}, p.mem, p.wire, p.clear)
	}
}

// checkBothWays fills a value of mem and one of w and checks each reads
// as the other's type to the same bytes.
func checkBothWays(t *testing.T, fl *filler, mem, w reflect.Type, clear func(any)) {
	t.Helper()
	for _, dir := range [][2]reflect.Type{{mem, w}, {w, mem}} {
		v := reflect.New(dir[0])
		fl.fill(v.Elem())
		if dir[0] == w && clear != nil {
			clear(v.Interface())
		}
		if err := sameBytes(v.Interface(), dir[1]); err != nil {
			t.Fatalf("%s filled, read as %s: %v\n%s", dir[0], dir[1], err, changeAdvice)
		}
	}
}

// sameBytes encodes v, decodes that into a new value of type to
// (refusing keys to does not have) and encodes it again: the bytes must
// be equal.
func sameBytes(v any, to reflect.Type) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	w := reflect.New(to)
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(w.Interface()); err != nil {
		return fmt.Errorf("decode %s as %s: %w", b, to, err)
	}
	got, err := json.Marshal(w.Interface())
	if err != nil {
		return err
	}
	if !bytes.Equal(got, b) {
		return fmt.Errorf("encodes\n%s\nagainst\n%s", got, b)
	}
	return nil
}

// FuzzRuntimeEncodesAsWire: random values of every in-memory form (nil
// and empty slices, zero fields, strings JSON escapes)
// encode as their wire types, both ways, and convert there and back
// losing nothing.
func FuzzRuntimeEncodesAsWire(f *testing.F) {
	for seed := range uint64(64) {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, seed uint64) {
		fl := &filler{rng: rand.New(rand.NewPCG(seed, seed>>1))}
		for _, p := range inMemory {
			checkBothWays(t, fl, p.mem, p.wire, p.clear)
		}
		checkConversions(t, fl)
		checkCommitPath(t, fl)
	})
}

// The conversions between the runtime's structs and the wire's keep
// every field: a value with every field set (and random ones, in
// FuzzRuntimeEncodesAsWire) goes there and back unchanged, and encodes as
// the same bytes on both sides.
func TestConversionsKeepEveryField(t *testing.T) {
	checkConversions(t, &filler{})
}

func checkConversions(t *testing.T, fl *filler) {
	t.Helper()
	var cp runtime.Checkpoint
	fl.fill(reflect.ValueOf(&cp).Elem())
	w := ToWire(&cp)
	if back := FromWire(&w); !reflect.DeepEqual(back, cp) {
		t.Fatalf("runtime -> wire -> runtime:\n got %+v\nwant %+v", back, cp)
	}
	sameEncoding(t, &cp, &w)
	var wc wire.Checkpoint
	fl.fill(reflect.ValueOf(&wc).Elem())
	rc := FromWire(&wc)
	if back := ToWire(&rc); !reflect.DeepEqual(back, wc) {
		t.Fatalf("wire -> runtime -> wire:\n got %+v\nwant %+v", back, wc)
	}
	sameEncoding(t, &rc, &wc)

	var p Checkpoint
	fl.fill(reflect.ValueOf(&p).Elem())
	wp := p.Wire()
	back := Checkpoint{Checkpoint: FromWire(&wp.Checkpoint), UsedCallIDsBase: wp.UsedCallIDsBase, UsedCallIDsBaseRev: wp.UsedCallIDsBaseRev,
		CallsBase: wp.CallsBase, CallsBaseRev: wp.CallsBaseRev, CallsAt: wp.CallsAt, Ledger: wp.Ledger}
	if !reflect.DeepEqual(back, p) {
		t.Fatalf("payload -> wire -> payload:\n got %+v\nwant %+v", back, p)
	}
	sameEncoding(t, &p, &wp)

	var c Compaction
	fl.fill(reflect.ValueOf(&c).Elem())
	wcomp := c.Wire()
	if back := CompactionFromWire(wcomp.Compaction); !reflect.DeepEqual(back, c.Compaction) {
		t.Fatalf("compaction -> wire -> compaction:\n got %+v\nwant %+v", back, c.Compaction)
	}
	sameEncoding(t, &c, &wcomp)
}

func sameEncoding(t *testing.T, mem, w any) {
	t.Helper()
	a, errA := json.Marshal(mem)
	b, errB := json.Marshal(w)
	if errA != nil || errB != nil || !bytes.Equal(a, b) {
		t.Fatalf("%T and %T encode differently:\n%s (%v)\n%s (%v)\n%s", mem, w, a, errA, b, errB, changeAdvice)
	}
}

// The commit path writes what the wire types say: the payload it builds
// by hand around the runtime's encoding (CheckpointPayloadWith) is the
// bytes of wire.Commit, and of wire.CommitV1 on bases a version 1 commit
// has; a compaction's event (New) is wire.Compacted's.
func TestCommitPathWritesWire(t *testing.T) {
	checkCommitPath(t, &filler{})
	for _, on := range []Bases{{}, {UsedSeq: 3, UsedRev: 1}, {CallsRev: 2}, {UsedSeq: 3, UsedRev: 1, CallsSeq: 4, CallsRev: 2, CallsAt: []int{0, 5}},
		{Ledger: &Ledger{}}, {CallsRev: 2, Ledger: &Ledger{Steps: 3, InputTokens: 120, OutputTokens: 45}}} {
		checkPayload(t, &runtime.Checkpoint{Revision: 3}, on)
	}
}

func checkCommitPath(t *testing.T, fl *filler) {
	t.Helper()
	var cp runtime.Checkpoint
	fl.fill(reflect.ValueOf(&cp).Elem())
	var on Bases
	fl.fill(reflect.ValueOf(&on).Elem())
	// Bases as a store makes them: a revision with each sequence, calls'
	// sequence and indices only on a listing's revision.
	on.UsedRev, on.CallsRev = max(on.UsedRev, 1), max(on.CallsRev, 0)
	if on.UsedSeq == 0 {
		on.UsedRev = 0
	}
	if on.CallsRev == 0 {
		on.CallsSeq, on.CallsAt = 0, nil
	}
	checkPayload(t, &cp, on)

	var c Compaction
	fl.fill(reflect.ValueOf(&c).Elem())
	e, err := New(WindowCompacted, "s", "r", 1, 1, time.Unix(0, 0), c)
	if err != nil {
		t.Fatal(err)
	}
	want, _ := json.Marshal(c.Wire())
	if !bytes.Equal(e.Data, want) {
		t.Fatalf("a compaction's event writes\n%s\nwire.Compacted is\n%s", e.Data, want)
	}
}

func checkPayload(t *testing.T, cp *runtime.Checkpoint, on Bases) {
	t.Helper()
	b, err := json.Marshal(cp)
	if err != nil {
		t.Fatal(err)
	}
	got := CheckpointPayloadWith(b, on)
	w := wire.Commit{Checkpoint: ToWire(cp), UsedCallIDsBase: on.UsedSeq, UsedCallIDsBaseRev: on.UsedRev,
		CallsBase: on.CallsSeq, CallsBaseRev: on.CallsRev, CallsAt: on.CallsAt, Ledger: on.Ledger}
	want, _ := json.Marshal(&w)
	if !bytes.Equal(got, want) {
		t.Fatalf("the commit path writes\n%s\nwire.Commit is\n%s", got, want)
	}
	if on.CallsRev == 0 && on.Ledger == nil {
		if err := sameBytes(&got, reflect.TypeFor[wire.CommitV1]()); err != nil {
			t.Fatalf("a commit without call changes or totals is not wire.CommitV1: %v", err)
		}
	}
	if on.Ledger == nil {
		if err := sameBytes(&got, reflect.TypeFor[wire.CommitV2]()); err != nil {
			t.Fatalf("a commit without totals is not wire.CommitV2: %v", err)
		}
	}
	e := NewCommit("s", "r", 1, 1, time.Unix(0, 0), b, on)
	version := 1
	switch {
	case on.Ledger != nil:
		version = LedgerVersion
	case on.CallsRev > 0:
		version = 2
	}
	if e.Version != version {
		t.Fatalf("a commit on bases %+v is version %d, want %d", on, e.Version, version)
	}
}

// Every payload of every recorded log is exactly its version's wire type
// (no key the type lacks, the same bytes encoded again), and reads into
// this build's form and encodes back, the way the writers encode it, to
// the bytes recorded: what this build writes for the same input is what
// the builds that recorded them wrote.
func TestRecordedPayloadsAreWire(t *testing.T) {
	files, _ := filepath.Glob("testdata/*/*.jsonl")
	if len(files) == 0 {
		t.Fatal("no recorded logs")
	}
	for _, path := range files {
		t.Run(path, func(t *testing.T) {
			f, err := os.Open(path)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			sc := bufio.NewScanner(f)
			sc.Buffer(nil, 16<<20)
			n := 0
			for sc.Scan() {
				n++
				var line struct {
					Body json.RawMessage `json:"body"`
				}
				if err := json.Unmarshal(sc.Bytes(), &line); err != nil {
					t.Fatal(err)
				}
				e, err := Decode(line.Body)
				if err != nil {
					t.Fatalf("line %d: %v", n, err)
				}
				ver, err := versionOf(e.Version)
				if err != nil {
					t.Fatalf("line %d: %v", n, err)
				}
				if err := sameBytes(&e.Data, reflect.TypeOf(ver.payloads[e.Type])); err != nil {
					t.Fatalf("line %d, %s version %d, as %T: %v", n, e.Type, e.Version, ver.payloads[e.Type], err)
				}
				if filepath.Base(filepath.Dir(path)) == "v1-early" {
					continue // an earlier build's form (calls[].result), which this build reads and does not write
				}
				var again []byte
				switch e.Type {
				case CheckpointCommitted:
					var p Checkpoint
					if err := e.Payload(&p); err != nil {
						t.Fatal(err)
					}
					b, _ := json.Marshal(&p.Checkpoint)
					again = CheckpointPayloadWith(b, Bases{UsedSeq: p.UsedCallIDsBase, UsedRev: p.UsedCallIDsBaseRev, CallsSeq: p.CallsBase, CallsRev: p.CallsBaseRev, CallsAt: p.CallsAt, Ledger: p.Ledger})
				case WindowCompacted:
					var c Compaction
					if err := e.Payload(&c); err != nil {
						t.Fatal(err)
					}
					again, _ = json.Marshal(c)
				default:
					v := reflect.New(reflect.TypeOf(ver.payloads[e.Type]))
					if err := e.Payload(v.Interface()); err != nil {
						t.Fatal(err)
					}
					again, _ = json.Marshal(v.Interface())
				}
				if !bytes.Equal(again, e.Data) {
					t.Fatalf("line %d, %s: recorded\n%s\nwritten again\n%s", n, e.Type, e.Data, again)
				}
			}
			if n == 0 {
				t.Fatal("empty log")
			}
		})
	}
}

// Package wire imports nothing of Cairn's: no field of the log can be a
// type another package owns.
func TestWireImportsNoCairn(t *testing.T) {
	files, _ := filepath.Glob("wire/*.go")
	if len(files) == 0 {
		t.Fatal("no files in events/wire")
	}
	for _, path := range files {
		f, err := parser.ParseFile(token.NewFileSet(), path, nil, parser.ImportsOnly)
		if err != nil {
			t.Fatal(err)
		}
		for _, imp := range f.Imports {
			if p, _ := strconv.Unquote(imp.Path.Value); strings.HasPrefix(p, "github.com/cairn-agents/cairn") {
				t.Errorf("%s imports %s: the schema's types are its own", path, p)
			}
		}
	}
}

const goldenPath = "testdata/wire-schema.golden"

// The wire schema, described (each version's event types, their
// payloads and every type those hold: Go name, JSON name and options,
// type), is the one checked in: a change of a wire type fails here until
// the description is written again, with the version it needs.
func TestWireSchema(t *testing.T) {
	got, err := describeSchema(versions)
	if err != nil {
		t.Fatal(err)
	}
	if *update {
		if err := os.WriteFile(goldenPath, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	b, err := os.ReadFile(goldenPath)
	if err != nil {
		t.Fatalf("%v: write it with go test ./events -run TestWireSchema -update", err)
	}
	for _, msg := range schemaChanges(string(b), got, SchemaVersion) {
		t.Error(msg)
	}
}

// schemaChanges says how the description got differs from want, the one
// checked in, version by version, and what each change needs.
func schemaChanges(want, got string, newest int) []string {
	if got == want {
		return nil
	}
	const again = "then write the description again: go test ./events -run TestWireSchema -update"
	var out []string
	gotV, wantV := sections(got), sections(want)
	for v := 1; v < max(len(gotV), len(wantV)); v++ {
		g, w := section(gotV, v), section(wantV, v)
		var why string
		switch {
		case g == w:
			continue
		case w == "":
			why = fmt.Sprintf("version %d is new", v)
		case v < newest:
			why = fmt.Sprintf("version %d is not the newest: the logs written in it must read as they were written, so its types never change "+
				"(keep the forms it wrote, as wire.CommitV1 is kept, and change the newest version's)", v)
		default:
			why = fmt.Sprintf("for a change a reader of version %d would misread (anything but a field added with omitempty), "+
				"bump events.SchemaVersion and add an upcaster (events/schema.go)", v)
		}
		out = append(out, fmt.Sprintf("the wire schema of version %d changed (%s):\n%s\n%s;\n%s", v, goldenPath, lineDiff(w, g), why, again))
	}
	if out == nil {
		out = append(out, fmt.Sprintf("%s differs from the schema outside the versions' sections; %s", goldenPath, again))
	}
	return out
}

// describeSchema describes every version of vs.
func describeSchema(vs []version) (string, error) {
	var b strings.Builder
	b.WriteString(`# The schema of Cairn's log, version by version: each event type's
# payload and every type it holds (Go field, JSON name and options, Go
# type). Written by: go test ./events -run TestWireSchema -update
# A released version's section never changes; see package events/wire.
`)
	for v := 1; v < len(vs); v++ {
		fmt.Fprintf(&b, "\nversion %d\n", v)
		tw := tabwriter.NewWriter(&b, 0, 4, 2, ' ', 0)
		fmt.Fprintf(tw, "  envelope\t%s\n", reflect.TypeFor[Envelope]())
		roots := []reflect.Type{reflect.TypeFor[Envelope]()}
		types := slices.Sorted(maps.Keys(vs[v].payloads))
		for _, typ := range types {
			p := vs[v].payloads[typ]
			if p == nil {
				fmt.Fprintf(tw, "  %s\treserved, no payload\n", typ)
				continue
			}
			fmt.Fprintf(tw, "  %s\t%s\n", typ, reflect.TypeOf(p))
			roots = append(roots, reflect.TypeOf(p))
		}
		_ = tw.Flush()
		for _, st := range reachable(roots) {
			fields, err := jsonFields(st)
			if err != nil {
				return "", err
			}
			fmt.Fprintf(&b, "\n  %s\n", st)
			tw := tabwriter.NewWriter(&b, 0, 4, 2, ' ', 0)
			for _, f := range fields {
				name := f.name
				if f.opts != "" {
					name += "," + f.opts
				}
				fmt.Fprintf(tw, "    %s\t%s\t%s\n", f.goName, name, f.typ)
			}
			_ = tw.Flush()
		}
	}
	return b.String(), nil
}

// A change of a payload's type changes the description of every version
// that writes it, and each is told what it needs: a released version
// that it must not change, the newest a version bump unless compatible.
func TestSchemaChangesNameTheVersion(t *testing.T) {
	type leaseRenamed struct {
		Holder string `json:"owner"`
		Epoch  int64  `json:"epoch"`
	}
	type embeds struct {
		wire.Lease
	}
	base, err := describeSchema(versions)
	if err != nil {
		t.Fatal(err)
	}
	with := func(v int, typ Type, payload any) []version {
		vs := slices.Clone(versions)
		vs[v].payloads = maps.Clone(vs[v].payloads)
		vs[v].payloads[typ] = payload
		return vs
	}
	newest := len(versions) - 1
	for _, tc := range []struct {
		name string
		vs   []version
		want []string
	}{
		{"the newest version's lease", with(newest, LeaseAcquired, leaseRenamed{}), []string{fmt.Sprintf("version %d changed", newest), "owner", "bump events.SchemaVersion and add an upcaster"}},
		{"a released version's lease", with(1, LeaseAcquired, leaseRenamed{}), []string{"version 1 changed", "owner", "is not the newest"}},
		{"a new version", append(slices.Clone(versions), versions[newest]), []string{fmt.Sprintf("version %d is new", newest+1)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := describeSchema(tc.vs)
			if err != nil {
				t.Fatal(err)
			}
			msgs := schemaChanges(base, got, newest)
			if len(msgs) != 1 {
				t.Fatalf("%d messages, want 1: %q", len(msgs), msgs)
			}
			for _, w := range tc.want {
				if !strings.Contains(msgs[0], w) {
					t.Fatalf("message %q does not say %q", msgs[0], w)
				}
			}
		})
	}
	if _, err := describeSchema(with(newest, LeaseAcquired, embeds{})); err == nil || !strings.Contains(err.Error(), "embeds") {
		t.Fatalf("a payload embedding a struct: %v, want it refused", err)
	}
	if msgs := schemaChanges(base, base, newest); msgs != nil {
		t.Fatalf("no change: %q", msgs)
	}
}

// reachable lists the struct types roots hold, in the order first met,
// but those with their own JSON (time.Time): their form is theirs.
func reachable(roots []reflect.Type) []reflect.Type {
	var out []reflect.Type
	seen := map[reflect.Type]bool{}
	var walk func(t reflect.Type)
	walk = func(t reflect.Type) {
		for t.Kind() == reflect.Pointer || t.Kind() == reflect.Slice || t.Kind() == reflect.Array || t.Kind() == reflect.Map {
			t = t.Elem()
		}
		if t.Kind() != reflect.Struct || ownJSON(t) || seen[t] {
			return
		}
		seen[t] = true
		out = append(out, t)
		fields, _ := jsonFields(t)
		for _, f := range fields {
			walk(f.typ)
		}
	}
	for _, r := range roots {
		walk(r)
	}
	return out
}

// sections splits a description by version: sections[v] is version v's.
func sections(s string) []string {
	out := []string{""}
	for _, part := range strings.Split(s, "\nversion ")[1:] {
		out = append(out, "version "+part)
	}
	return out
}

func section(s []string, i int) string {
	if i < len(s) {
		return s[i]
	}
	return ""
}

// lineDiff shows the lines of want missing from got (-) and those of got
// not in want (+).
func lineDiff(want, got string) string {
	wl, gl := strings.Split(want, "\n"), strings.Split(got, "\n")
	var b strings.Builder
	for _, l := range wl {
		if !slices.Contains(gl, l) {
			fmt.Fprintf(&b, "- %s\n", l)
		}
	}
	for _, l := range gl {
		if !slices.Contains(wl, l) {
			fmt.Fprintf(&b, "+ %s\n", l)
		}
	}
	return strings.TrimSuffix(b.String(), "\n")
}

// The field-by-field comparison names each kind of change of a field:
// a renamed, added, removed, retyped, reordered or re-optioned field,
// an embedded struct, a type with its own JSON in place of a plain one.
func TestSameJSONNamesTheField(t *testing.T) {
	type call struct {
		ID    string `json:"id"`
		State string `json:"state,omitempty"`
	}
	type base struct {
		Rev   int64  `json:"rev"`
		Calls []call `json:"calls"`
	}
	type renamed struct {
		Rev   int64  `json:"revision"`
		Calls []call `json:"calls"`
	}
	type added struct {
		Rev   int64  `json:"rev"`
		Calls []call `json:"calls"`
		New   string `json:"new,omitempty"`
	}
	type retypedCall struct {
		ID    int    `json:"id"`
		State string `json:"state,omitempty"`
	}
	type retyped struct {
		Rev   int64         `json:"rev"`
		Calls []retypedCall `json:"calls"`
	}
	type reordered struct {
		Calls []call `json:"calls"`
		Rev   int64  `json:"rev"`
	}
	type optionCall struct {
		ID    string `json:"id"`
		State string `json:"state"`
	}
	type optioned struct {
		Rev   int64        `json:"rev"`
		Calls []optionCall `json:"calls"`
	}
	type embedded struct {
		base
	}
	type timed struct {
		Rev   time.Time `json:"rev"`
		Calls []call    `json:"calls"`
	}
	for _, tc := range []struct {
		other reflect.Type
		want  string
	}{
		{reflect.TypeFor[renamed](), "root.revision: "},
		{reflect.TypeFor[added](), "root.new: "},
		{reflect.TypeFor[retyped](), "root.calls[].id: "},
		{reflect.TypeFor[reordered](), "root: field 0 is "},
		{reflect.TypeFor[optioned](), "root.calls[].state: "},
		{reflect.TypeFor[embedded](), "embeds"},
		{reflect.TypeFor[timed](), "root.rev: "},
	} {
		t.Run(tc.other.Name(), func(t *testing.T) {
			diffs := sameJSON(tc.other, reflect.TypeFor[base](), "root", nil)
			if len(diffs) == 0 || !strings.Contains(diffs[0], tc.want) {
				t.Fatalf("diffs %q, want one with %q", diffs, tc.want)
			}
		})
	}
	if d := sameJSON(reflect.TypeFor[optioned](), reflect.TypeFor[optioned](), "root", nil); d != nil {
		t.Fatalf("a type against itself: %q", d)
	}
	// A wire field the in-memory form may drop is allowed only where it
	// is named, and a stale allowance is itself a difference.
	type callResult struct {
		ID     string `json:"id"`
		State  string `json:"state,omitempty"`
		Result string `json:"result,omitempty"`
	}
	type withResult struct {
		Rev   int64        `json:"rev"`
		Calls []callResult `json:"calls"`
	}
	drop := map[string]string{"root.calls[].result": "why"}
	if d := sameJSON(reflect.TypeFor[base](), reflect.TypeFor[withResult](), "root", drop); d != nil {
		t.Fatalf("a dropped field allowed: %q", d)
	}
	if d := sameJSON(reflect.TypeFor[base](), reflect.TypeFor[withResult](), "root", nil); len(d) != 1 || !strings.Contains(d[0], "root.calls[].result") {
		t.Fatalf("a dropped field not allowed: %q", d)
	}
	if d := sameJSON(reflect.TypeFor[base](), reflect.TypeFor[base](), "root", drop); len(d) != 1 || !strings.Contains(d[0], "no such wire field") {
		t.Fatalf("a stale allowance: %q", d)
	}
}

// filler sets every field of a value. Without rng each field gets a
// value of its own, every slice two elements, every pointer a value; with
// rng fields are random, zero, nil or empty alike.
type filler struct {
	rng *rand.Rand
	n   int
}

// strs are strings JSON escapes. Not invalid UTF-8: encoding/json
// writes it as U+FFFD escaped, which reads back as U+FFFD and is written
// unescaped, whatever the struct, so bytes read from the log and written
// again would differ on both sides alike.
var strs = []string{"", "a", `"q" \ /`, "<&>", "\u2028\u2029", "é", "\x00\x1f", "😀"}

func (f *filler) fill(v reflect.Value) {
	f.n++
	r := f.rng
	switch v.Type() {
	case reflect.TypeFor[time.Time]():
		at := time.Unix(int64(f.n)*1000, int64(f.n))
		if r != nil {
			at = time.Unix(r.Int64N(1<<34), r.Int64N(1e9)).In(time.FixedZone("z", 3600*(r.IntN(25)-12)))
		}
		v.Set(reflect.ValueOf(at))
		return
	case reflect.TypeFor[json.RawMessage]():
		raw := fmt.Sprintf(`{"n":%d.50,"s":"x"}`, f.n)
		if r != nil {
			raw = []string{"", "null", "1e3", `"s"`, `[1, {"a":true}]`, ` {"x" : 1} `}[r.IntN(6)]
		}
		if raw != "" || (r != nil && r.IntN(2) == 0) {
			v.Set(reflect.ValueOf(json.RawMessage(raw)))
		}
		return
	}
	if r != nil && r.IntN(5) == 0 {
		return // zero
	}
	switch v.Kind() {
	case reflect.String:
		s := fmt.Sprintf("s%d", f.n)
		if r != nil {
			s = strs[r.IntN(len(strs))] + s
		}
		v.SetString(s)
	case reflect.Bool:
		v.SetBool(true)
	case reflect.Int, reflect.Int64, reflect.Int32:
		n := int64(f.n)
		if r != nil {
			n = r.Int64N(1<<40) - 1<<39
		}
		v.SetInt(n)
	case reflect.Uint64, reflect.Uint, reflect.Uint32:
		n := uint64(f.n)
		if r != nil {
			n = r.Uint64() >> r.IntN(64)
		}
		v.SetUint(n)
	case reflect.Uint8:
		v.SetUint(uint64(f.n))
	case reflect.Pointer:
		p := reflect.New(v.Type().Elem())
		f.fill(p.Elem())
		v.Set(p)
	case reflect.Slice:
		n := 2
		if r != nil {
			n = r.IntN(4)
		}
		s := reflect.MakeSlice(v.Type(), n, n)
		for i := range n {
			f.fill(s.Index(i))
		}
		v.Set(s)
	case reflect.Map:
		m := reflect.MakeMap(v.Type())
		n := 2
		if r != nil {
			n = r.IntN(3)
		}
		for range n {
			k, e := reflect.New(v.Type().Key()).Elem(), reflect.New(v.Type().Elem()).Elem()
			f.fill(k)
			f.fill(e)
			m.SetMapIndex(k, e)
		}
		v.Set(m)
	case reflect.Struct:
		for i := range v.NumField() {
			if v.Type().Field(i).IsExported() {
				f.fill(v.Field(i))
			}
		}
	default:
		panic(fmt.Sprintf("filler: %s (%s) is not a kind the log holds", v.Type(), v.Kind()))
	}
}
