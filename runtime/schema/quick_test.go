package schema

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"testing"
)

// libraryValid is the library's verdict alone, for the same decoded value
// Validate gives it.
func libraryValid(t testing.TB, s *Schema, instance []byte) (valid, ok bool) {
	t.Helper()
	v, jerr := decodeJSON(instance, maxInstanceDepth, true)
	if jerr != nil || !s.c.plan.evaluations(v, maxEvaluations) {
		return false, false
	}
	return s.c.lib.Validate(v).IsValid(), true
}

// quickValid is quick's verdict; ok is false when the schema has none or
// the instance is not one Validate would hand it.
func quickValid(t testing.TB, s *Schema, instance []byte) (valid, ok bool) {
	t.Helper()
	v, jerr := decodeJSON(instance, maxInstanceDepth, true)
	if jerr != nil || s.c.quick == nil || !s.c.plan.evaluations(v, maxEvaluations) {
		return false, false
	}
	return s.c.quick.valid(v), true
}

// Each keyword quick knows, at its edges. quick is the fast verdict: true
// only where the library accepts too (checked for every row); false sends
// the value to the library, which then decides (lib).
func TestQuickAgreesWithTheLibrary(t *testing.T) {
	for _, tc := range []struct {
		schema, instance string
		quick, lib       bool
	}{
		{`{"type":"object","properties":{"code":{"type":"string","minLength":1}},"required":["code"],"additionalProperties":false}`, `{"code":"return 1"}`, true, true},
		{`{"type":"object","properties":{"code":{"type":"string","minLength":1}},"required":["code"],"additionalProperties":false}`, `{"code":""}`, false, false},
		{`{"type":"object","properties":{"code":{"type":"string","minLength":1}},"required":["code"],"additionalProperties":false}`, `{}`, false, false},
		{`{"type":"object","properties":{"code":{"type":"string","minLength":1}},"required":["code"],"additionalProperties":false}`, `{"code":"x","y":1}`, false, false},
		{`{"type":"object","properties":{"code":{"type":"string","minLength":1}},"required":["code"],"additionalProperties":false}`, `{"code":1}`, false, false},
		{`{"type":"object","properties":{"code":{"type":"string"}},"required":["code"]}`, `{"code":null}`, false, false},
		{`{"type":"object","required":["a"]}`, `{"a":null}`, true, true},
		{`{"required":["a"]}`, `[1]`, true, true}, // required applies to objects only
		{`{"properties":{"a":{"type":"string"}}}`, `"not an object"`, true, true},
		// A missing required property with a default: the library does
		// not evaluate its schema; quick refuses to say.
		{`{"properties":{"a":{"type":"string","default":"x"}},"required":["a"]}`, `{}`, false, false},
		{`{"properties":{"a":{"type":"string","default":"x"}}}`, `{}`, true, true},
		// Code points, not bytes: "é" is 2 bytes, "😀" 4 and one point each.
		{`{"type":"string","maxLength":1}`, `"é"`, true, true},
		{`{"type":"string","maxLength":1}`, `"😀"`, true, true},
		{`{"type":"string","minLength":2}`, `"😀"`, false, false},
		{`{"type":"string","minLength":2,"maxLength":2}`, `"\u00e9x"`, true, true},
		{`{"type":"string","maxLength":0}`, `""`, true, true},
		{`{"maxLength":1.0}`, `"ab"`, false, false},
		{`{"maxLength":1e1}`, `"abcdefghij"`, true, true},
		// Integers: plain digits are sure; the library also takes a zero
		// fraction, which quick leaves to it.
		{`{"type":"integer"}`, `3`, true, true},
		{`{"type":"integer"}`, `-0`, true, true},
		{`{"type":"integer"}`, `123456789012345678901234567890`, true, true},
		{`{"type":"integer"}`, `3.0`, false, true},
		{`{"type":"integer"}`, `1e3`, false, true},
		{`{"type":"integer"}`, `3.5`, false, false},
		{`{"type":"number"}`, `3.5`, true, true},
		{`{"type":"number"}`, `-1e-999`, true, true},
		{`{"type":"number"}`, `"3"`, false, false},
		{`{"type":["string","null"]}`, `null`, true, true},
		{`{"type":["string","null"]}`, `false`, false, false},
		{`{"type":"boolean"}`, `false`, true, true},
		{`{"type":"array","items":{"type":"integer"},"minItems":1,"maxItems":2}`, `[1,2]`, true, true},
		{`{"type":"array","items":{"type":"integer"},"minItems":1,"maxItems":2}`, `[]`, false, false},
		{`{"type":"array","items":{"type":"integer"},"minItems":1,"maxItems":2}`, `[1,2,3]`, false, false},
		{`{"type":"array","items":{"type":"integer"}}`, `[1,"2"]`, false, false},
		{`{"minProperties":1,"maxProperties":1}`, `{"a":1}`, true, true},
		{`{"minProperties":1,"maxProperties":1}`, `{}`, false, false},
		{`{"minProperties":1,"maxProperties":1}`, `{"a":1,"b":2}`, false, false},
		{`{"additionalProperties":{"type":"integer"},"properties":{"s":{"type":"string"}}}`, `{"s":"x","n":1}`, true, true},
		{`{"additionalProperties":{"type":"integer"},"properties":{"s":{"type":"string"}}}`, `{"s":"x","n":"1"}`, false, false},
		{`true`, `{"anything":[1]}`, true, true},
		{`false`, `null`, false, false},
		{`{"properties":{"a":false}}`, `{"a":1}`, false, false},
		{`{"properties":{"a":false}}`, `{"b":1}`, true, true},
		{`{"$schema":"http://json-schema.org/draft-07/schema#","type":"object","title":"t","description":"d","format":"email","examples":[1],"deprecated":true,"$comment":"c"}`, `{}`, true, true},
		{`{"type":"string","format":"email"}`, `"not an email"`, true, true}, // format is an annotation
	} {
		s := mustCompile(t, tc.schema)
		q, ok := quickValid(t, s, []byte(tc.instance))
		if !ok {
			t.Errorf("%s: no quick check", tc.schema)
			continue
		}
		lib, _ := libraryValid(t, s, []byte(tc.instance))
		if q != tc.quick || lib != tc.lib {
			t.Errorf("%s against %s: quick %v, library %v; want %v, %v", tc.instance, tc.schema, q, lib, tc.quick, tc.lib)
		}
		if err := s.Validate([]byte(tc.instance)); (err == nil) != tc.lib {
			t.Errorf("%s against %s: Validate = %v, want valid=%v", tc.instance, tc.schema, err, tc.lib)
		}
	}
}

// Keywords quick does not know leave the schema to the library alone, so
// every verdict and issue is the library's.
func TestQuickOnlyForKeywordsItKnows(t *testing.T) {
	for _, raw := range []string{
		`{"enum":["a"]}`, `{"const":1}`, `{"minimum":0}`, `{"pattern":"a"}`, `{"uniqueItems":true}`,
		`{"oneOf":[{"type":"string"}]}`, `{"allOf":[true]}`, `{"not":false}`, `{"prefixItems":[true]}`,
		`{"$defs":{"a":true},"$ref":"#/$defs/a"}`, `{"multipleOf":2}`,
		`{"properties":{"a":{"properties":{"b":{"enum":[1]}}}}}`, `{"items":{"pattern":"x"}}`,
		`{"additionalProperties":{"const":1}}`,
	} {
		if s := mustCompile(t, raw); s.c.quick != nil {
			t.Errorf("%s has a quick check", raw)
		}
	}
}

// The refusal is the library's, issues and all, whether or not quick ran.
func TestQuickLeavesRefusalsToTheLibrary(t *testing.T) {
	s := mustCompile(t, `{"type":"object","properties":{"code":{"type":"string","minLength":1}},"required":["code"],"additionalProperties":false}`)
	if s.c.quick == nil {
		t.Fatal("no quick check")
	}
	slow := *s.c
	slow.quick = nil
	for _, in := range []string{`{"code":""}`, `{}`, `{"code":"x","extra":true}`, `[]`, `{"code":`} {
		a, b := s.Validate([]byte(in)), (&Schema{raw: s.raw, c: &slow}).Validate([]byte(in))
		if a == nil || errString(a) != errString(b) {
			t.Errorf("%s: %v, without quick %v", in, a, b)
		}
	}
}

// TestQuickNeverAcceptsWhatTheLibraryRefuses draws schemas from quick's
// keywords and values near them (seeded: the seed is printed and a failure
// replays with CAIRN_QUICK_SEED), and checks that quick says valid only
// where the library does. It also checks quick says valid for most valid
// values, or it would save nothing.
func TestQuickNeverAcceptsWhatTheLibraryRefuses(t *testing.T) {
	seed := seedFromEnv(t, "CAIRN_QUICK_SEED")
	rng := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	var pairs, libValid, quickSaid int
	for range 3000 {
		sch := genSchema(rng, 0)
		raw, _ := json.Marshal(sch)
		s, err := Compile(raw)
		if err != nil {
			t.Fatalf("seed %d: generated schema %s refused: %v", seed, raw, err)
		}
		if s.c.quick == nil {
			t.Fatalf("seed %d: %s has no quick check", seed, raw)
		}
		for range 8 {
			in := genValue(rng, sch, 0)
			lib, ok := libraryValid(t, s, in)
			if !ok {
				continue
			}
			q, _ := quickValid(t, s, in)
			pairs++
			if lib {
				libValid++
			}
			if q {
				quickSaid++
				if !lib {
					t.Fatalf("seed %d: quick accepts %s against %s; the library refuses it", seed, in, raw)
				}
			}
		}
	}
	t.Logf("seed %d: %d pairs, %d valid to the library, %d of them said by quick", seed, pairs, libValid, quickSaid)
	if libValid < pairs/5 || quickSaid < libValid*3/4 {
		t.Fatalf("seed %d: %d pairs, %d valid, %d by quick: the generator or quick drifted", seed, pairs, libValid, quickSaid)
	}
}

// FuzzQuickAgreesWithTheLibrary: for any schema with a quick check and any
// instance, quick never accepts what the library refuses.
func FuzzQuickAgreesWithTheLibrary(f *testing.F) {
	for _, tc := range [][2]string{
		{`{"type":"object","properties":{"code":{"type":"string","minLength":1}},"required":["code"],"additionalProperties":false}`, `{"code":"x"}`},
		{`{"type":"integer"}`, `1.0`}, {`{"type":"integer"}`, `-0`}, {`{"maxLength":2}`, `"😀😀"`},
		{`{"items":{"type":["null","number"]},"maxItems":3}`, `[null,1e5,2]`},
		{`{"properties":{"a":{"default":1,"type":"string"}},"required":["a"]}`, `{}`},
		{`{"additionalProperties":false,"minProperties":1}`, `{"a":1}`},
	} {
		f.Add([]byte(tc[0]), []byte(tc[1]))
	}
	f.Fuzz(func(t *testing.T, schema, instance []byte) {
		s, err := Compile(schema)
		if err != nil || s.c.quick == nil {
			return
		}
		q, ok := quickValid(t, s, instance)
		if !ok || !q {
			return
		}
		if lib, _ := libraryValid(t, s, instance); !lib {
			t.Fatalf("quick accepts %s against %s; the library refuses it", instance, schema)
		}
	})
}

// genSchema draws a schema from quick's keywords.
func genSchema(rng *rand.Rand, depth int) any {
	if rng.IntN(12) == 0 {
		return rng.IntN(4) != 0 // true more often than false
	}
	m := map[string]any{}
	types := []string{"null", "boolean", "object", "array", "number", "integer", "string"}
	switch rng.IntN(4) {
	case 0: // no type
	case 1:
		m["type"] = types[rng.IntN(len(types))]
	default:
		// Deeper schemas lean to containers, so there is something inside.
		if depth < 2 && rng.IntN(2) == 0 {
			m["type"] = []string{"object", "array"}[rng.IntN(2)]
		} else {
			a, b := rng.IntN(len(types)), rng.IntN(len(types))
			if a == b {
				m["type"] = types[a]
			} else {
				m["type"] = []string{types[a], types[b]}
			}
		}
	}
	count := func() json.Number { return json.Number(fmt.Sprint(rng.IntN(4))) }
	if rng.IntN(3) == 0 {
		m["minLength"] = count()
	}
	if rng.IntN(3) == 0 {
		m["maxLength"] = count()
	}
	if depth < 3 {
		if rng.IntN(2) == 0 {
			props := map[string]any{}
			for i := range rng.IntN(4) {
				props[string(rune('a'+i))] = genSchema(rng, depth+1)
			}
			m["properties"] = props
			var req []string
			for name := range props {
				if rng.IntN(2) == 0 {
					req = append(req, name)
				}
			}
			if req != nil {
				m["required"] = req
			}
		}
		if rng.IntN(3) == 0 {
			m["additionalProperties"] = genSchema(rng, depth+1)
		}
		if rng.IntN(3) == 0 {
			m["items"] = genSchema(rng, depth+1)
		}
	}
	if rng.IntN(4) == 0 {
		m["minItems"] = count()
	}
	if rng.IntN(4) == 0 {
		m["maxItems"] = count()
	}
	if rng.IntN(4) == 0 {
		m["minProperties"] = count()
	}
	if rng.IntN(4) == 0 {
		m["maxProperties"] = count()
	}
	if rng.IntN(5) == 0 {
		m["default"] = "d"
	}
	return m
}

// genValue draws a JSON value near sch: mostly of its type, with its
// properties, sometimes anything.
func genValue(rng *rand.Rand, sch any, depth int) []byte {
	b, _ := json.Marshal(genAny(rng, sch, depth))
	return b
}

func genAny(rng *rand.Rand, sch any, depth int) any {
	m, _ := sch.(map[string]any)
	typ := ""
	switch t := m["type"].(type) {
	case string:
		typ = t
	case []string:
		typ = t[rng.IntN(len(t))]
	}
	if typ == "" || rng.IntN(8) == 0 {
		typ = []string{"null", "boolean", "object", "array", "number", "integer", "string"}[rng.IntN(7)]
	}
	switch typ {
	case "null":
		return nil
	case "boolean":
		return rng.IntN(2) == 0
	case "number":
		return json.Number([]string{"1.5", "0", "-2e3", "1e-5", "3.0", "7"}[rng.IntN(6)])
	case "integer":
		return json.Number([]string{"0", "-0", "12", "1.0", "2e2", "-7"}[rng.IntN(6)])
	case "string":
		return strings.Repeat([]string{"a", "é", "😀"}[rng.IntN(3)], rng.IntN(5))
	case "array":
		if depth > 4 {
			return []any{}
		}
		a := []any{}
		for range rng.IntN(5) {
			a = append(a, genAny(rng, m["items"], depth+1))
		}
		return a
	}
	if depth > 4 {
		return map[string]any{}
	}
	obj := map[string]any{}
	props, _ := m["properties"].(map[string]any)
	for name, sub := range props {
		if rng.IntN(5) != 0 {
			obj[name] = genAny(rng, sub, depth+1)
		}
	}
	for range rng.IntN(3) {
		obj[string(rune('x'+rng.IntN(3)))] = genAny(rng, m["additionalProperties"], depth+1)
	}
	return obj
}

// seedFromEnv returns the seed in the environment variable name, or a new
// one; either way it is logged, so a failure replays.
func seedFromEnv(t *testing.T, name string) uint64 {
	seed := rand.Uint64()
	if s, err := strconv.ParseUint(os.Getenv(name), 10, 64); err == nil {
		seed = s
	}
	t.Logf("seed %d (%s=%d replays it)", seed, name, seed)
	return seed
}
