package schema

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kaptinlin/jsonschema"
)

// Tests for the traps of github.com/kaptinlin/jsonschema v0.9.8 (those
// measured before Cairn used it and those found while building this
// package). Each has a
// test that fails if its guard is removed; where useful, a "library" subtest
// shows the raw library's behaviour, so that an upgrade which fixes (or
// changes) a trap shows up here. Together they hold C40's "no remote schema
// is fetched", "unsupported assertions, $id scopes and malformed schemas
// fail before model work", "numbers keep JSON precision" and "format is an
// annotation".

// schemaServer serves a schema over HTTP and counts the requests.
func schemaServer(t *testing.T) (url string, requests *atomic.Int64) {
	t.Helper()
	requests = new(atomic.Int64)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		requests.Add(1)
		w.Header().Set("Content-Type", "application/schema+json")
		fmt.Fprint(w, `{"type":"string"}`)
	}))
	t.Cleanup(srv.Close)
	return srv.URL, requests
}

// Trap: NewCompiler registers http and https loaders and fetches a remote
// $ref while compiling.
func TestTrapRemoteRefIsNeverFetched(t *testing.T) {
	url, requests := schemaServer(t)
	remote := fmt.Sprintf(`{"type":"object","properties":{"a":{"$ref":%q}}}`, url+"/s.json")

	t.Run("library", func(t *testing.T) {
		if _, err := jsonschema.NewCompiler().Compile([]byte(remote)); err != nil {
			t.Fatalf("library compile: %v", err)
		}
		if requests.Load() == 0 {
			t.Errorf("the library's default compiler no longer fetches remote refs: revisit the loader guard")
		}
		requests.Store(0)
	})

	t.Run("gate", func(t *testing.T) {
		for _, raw := range []string{
			remote,
			fmt.Sprintf(`{"$ref":%q}`, url+"/s.json#/definitions/x"),
			fmt.Sprintf(`{"allOf":[{"$ref":%q}]}`, strings.Replace(url, "http://", "https://", 1)+"/s.json"),
		} {
			ge := gateError(t, raw)
			if ge.Keyword != "$ref" {
				t.Errorf("keyword %q, want $ref (%v)", ge.Keyword, ge)
			}
		}
		if n := requests.Load(); n != 0 {
			t.Errorf("Compile made %d requests, want 0", n)
		}
	})

	// The guard itself, below the gate: the compiler this package uses has
	// no loader at all, so even a remote ref that slipped past the gate
	// would not be fetched.
	t.Run("compiler", func(t *testing.T) {
		c := newCompiler()
		if len(c.Loaders) != 0 {
			t.Errorf("loaders left: %v", len(c.Loaders))
		}
		s, err := c.Compile([]byte(remote))
		if err != nil {
			t.Fatalf("library compile: %v", err)
		}
		if n := requests.Load(); n != 0 {
			t.Errorf("newCompiler fetched: %d requests", n)
		}
		if checkResolved(s) == nil {
			t.Errorf("checkResolved accepted an unfetched remote ref")
		}
	})
}

// Trap: an unresolved $ref compiles and then validates every instance.
func TestTrapUnresolvedRef(t *testing.T) {
	const raw = `{"$ref":"#/$defs/missing"}`
	t.Run("library", func(t *testing.T) {
		s, err := newCompiler().Compile([]byte(raw))
		if err != nil {
			t.Fatalf("library compile: %v", err)
		}
		if !s.Validate(1).IsValid() || len(s.UnresolvedReferenceURIs()) != 1 {
			t.Errorf("the library now handles unresolved refs differently: revisit checkResolved")
		}
	})
	t.Run("gate", func(t *testing.T) {
		if ge := gateError(t, raw); ge.Keyword != "$ref" {
			t.Errorf("keyword %q", ge.Keyword)
		}
	})
	// compileLibrary must refuse unresolved refs even when the gate's walk
	// did not see them (here, a gate result that records no refs).
	t.Run("compileLibrary", func(t *testing.T) {
		doc, _ := decodeJSON([]byte(raw), maxSchemaDepth, false)
		g := &gate{doc: doc, schemas: map[string][]string{"": nil}, refTargets: map[string][]string{}}
		if _, err := compileLibrary([]byte(raw), g); err == nil || err.Keyword != "$ref" {
			t.Errorf("compileLibrary accepted an unresolved ref: %v", err)
		}
	})
}

// Trap: unknown keywords are ignored, so a typo checks nothing; keywords the
// library implements but Cairn does not support are enforced.
func TestTrapUnknownAndUnsupportedKeywords(t *testing.T) {
	t.Run("library", func(t *testing.T) {
		s, err := newCompiler().Compile([]byte(`{"minLenght":3}`))
		if err != nil || !s.Validate("").IsValid() {
			t.Errorf("the library now refuses or enforces unknown keywords: %v", err)
		}
		s, err = newCompiler().Compile([]byte(`{"if":{"type":"string"},"then":{"minLength":3}}`))
		if err != nil || s.Validate("ab").IsValid() {
			t.Errorf("the library no longer enforces if/then: %v", err)
		}
	})
	t.Run("gate", func(t *testing.T) {
		for raw, kw := range map[string]string{
			`{"minLenght":3}`: "minLenght",
			`{"if":{"type":"string"},"then":{"minLength":3}}`:     "if",
			`{"properties":{"a":{"patternProperties":{"x":{}}}}}`: "patternProperties",
		} {
			if ge := gateError(t, raw); ge.Keyword != kw {
				t.Errorf("%s: keyword %q, want %q", raw, ge.Keyword, kw)
			}
		}
	})
}

// Trap: enum: [] is treated as absent (everything valid).
func TestTrapEmptyEnum(t *testing.T) {
	t.Run("library", func(t *testing.T) {
		s, err := newCompiler().Compile([]byte(`{"enum":[]}`))
		if err != nil || !s.Validate(1).IsValid() {
			t.Errorf("the library now handles enum: [] differently: %v", err)
		}
	})
	if ge := gateError(t, `{"enum":[]}`); ge.Keyword != "enum" {
		t.Errorf("keyword %q", ge.Keyword)
	}
}

// Trap: $id caches a schema on the compiler by URI; a second schema with the
// same $id compiles to the first.
func TestTrapID(t *testing.T) {
	t.Run("library", func(t *testing.T) {
		c := jsonschema.NewCompiler()
		a, _ := c.Compile([]byte(`{"$id":"https://example.com/a","type":"string"}`))
		b, _ := c.Compile([]byte(`{"$id":"https://example.com/a","type":"integer"}`))
		if a != b {
			t.Errorf("the library no longer caches by $id")
		}
	})
	if ge := gateError(t, `{"$id":"https://example.com/a","type":"integer"}`); ge.Keyword != "$id" {
		t.Errorf("keyword %q", ge.Keyword)
	}
	// Without $id, two schemas never share library state: each compiles on
	// a fresh compiler.
	a := mustCompile(t, `{"type":"string"}`)
	b := mustCompile(t, `{"type":"integer"}`)
	if a.c.lib == b.c.lib || a.c.lib.Compiler() == b.c.lib.Compiler() {
		t.Errorf("two schemas share a library compiler")
	}
}

// Trap: with both definitions and $defs, definitions is dropped and refs into
// it validate everything. And: "#/$defs/x" resolves into definitions.
func TestTrapDefinitionsAndDefs(t *testing.T) {
	both := `{"$defs":{"a":{"type":"string"}},"definitions":{"b":{"type":"string"}},"properties":{"x":{"$ref":"#/definitions/b"}}}`
	onlyDefinitions := `{"definitions":{"a":{"type":"string"}},"properties":{"x":{"$ref":"#/$defs/a"}}}`
	t.Run("library", func(t *testing.T) {
		s, err := newCompiler().Compile([]byte(both))
		if err != nil || !s.Validate(map[string]any{"x": 1}).IsValid() {
			t.Errorf("the library now keeps both $defs and definitions: %v", err)
		}
		s, err = newCompiler().Compile([]byte(onlyDefinitions))
		if err != nil || len(s.UnresolvedReferenceURIs()) != 0 {
			t.Errorf("the library no longer resolves #/$defs into definitions: %v", err)
		}
	})
	t.Run("gate", func(t *testing.T) {
		if ge := gateError(t, both); ge.Keyword != "definitions" {
			t.Errorf("both: keyword %q", ge.Keyword)
		}
		if ge := gateError(t, onlyDefinitions); ge.Keyword != "$ref" || ge.Pointer != "/properties/x" {
			t.Errorf("only definitions: %v", ge)
		}
	})
	t.Run("definitions alone work", func(t *testing.T) {
		s := mustCompile(t, `{"definitions":{"b":{"type":"string"}},"properties":{"x":{"$ref":"#/definitions/b"}}}`)
		if !hasIssue(issues(t, s, `{"x":1}`), "/x", "/definitions/b/type", "type") {
			t.Errorf("ref into definitions not enforced")
		}
	})
}

// Trap: minLength: -1 compiles; type: "strin" compiles and then refuses
// everything.
func TestTrapKeywordValues(t *testing.T) {
	t.Run("library", func(t *testing.T) {
		if _, err := newCompiler().Compile([]byte(`{"minLength":-1}`)); err != nil {
			t.Errorf("the library now refuses minLength -1: %v", err)
		}
		s, err := newCompiler().Compile([]byte(`{"type":"strin"}`))
		if err != nil || s.Validate("x").IsValid() {
			t.Errorf("the library now handles type strin differently: %v", err)
		}
	})
	for raw, kw := range map[string]string{`{"minLength":-1}`: "minLength", `{"type":"strin"}`: "type"} {
		if ge := gateError(t, raw); ge.Keyword != kw {
			t.Errorf("%s: keyword %q", raw, ge.Keyword)
		}
	}
}

// Trap: float64 input loses precision; bytes and json.Number keep it. The
// guard is Validate taking bytes and decoding numbers as json.Number.
func TestTrapNumberPrecision(t *testing.T) {
	t.Run("library with float64", func(t *testing.T) {
		var f float64
		if err := json.Unmarshal([]byte(`9007199254740993`), &f); err != nil {
			t.Fatal(err)
		}
		s, _ := newCompiler().Compile([]byte(`{"const":9007199254740992}`))
		if !s.Validate(f).IsValid() {
			t.Errorf("float64 input no longer collapses 2^53+1 into 2^53: revisit")
		}
	})
	tests := []struct {
		name     string
		schema   string
		valid    []string
		invalid  []string
		keywords string
	}{
		{"multipleOf 0.01", `{"multipleOf":0.01}`, []string{`0.07`, `0.1`, `19.99`, `-0.03`, `1e-2`}, []string{`0.071`, `0.001`, `19.999`}, "multipleOf"},
		{"multipleOf 0.1", `{"multipleOf":0.1}`, []string{`0.3`, `0.7`, `1.1`}, []string{`0.31`}, "multipleOf"},
		{"const above 2^53", `{"const":9007199254740993}`, []string{`9007199254740993`, `9007199254740993.0`}, []string{`9007199254740992`, `9007199254740994`}, "const"},
		{"enum above 2^53", `{"enum":[18446744073709551617]}`, []string{`18446744073709551617`}, []string{`18446744073709551616`}, "enum"},
		{"maximum 2^53", `{"maximum":9007199254740992}`, []string{`9007199254740992`}, []string{`9007199254740993`}, "maximum"},
		{"minimum with many digits", `{"minimum":0.10000000000000000001}`, []string{`0.10000000000000000001`, `0.2`}, []string{`0.1`}, "minimum"},
		{"exclusiveMinimum tiny", `{"exclusiveMinimum":1e-400}`, []string{`2e-400`}, []string{`1e-400`, `0`}, "exclusiveMinimum"},
		{"uniqueItems big integers", `{"uniqueItems":true}`, []string{`[9007199254740992,9007199254740993]`}, []string{`[9007199254740993,9007199254740993.0]`}, "uniqueItems"},
		{"integer type of a big integer", `{"type":"integer"}`, []string{`123456789012345678901234567890`, `1.0e30`}, []string{`123456789012345678901234567890.5`}, "type"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := mustCompile(t, tt.schema)
			for _, v := range tt.valid {
				if err := s.Validate([]byte(v)); err != nil {
					t.Errorf("Validate(%s): %v", v, err)
				}
			}
			for _, v := range tt.invalid {
				if !hasIssue(issues(t, s, v), "", "/"+tt.keywords, tt.keywords) {
					t.Errorf("Validate(%s): no %s issue", v, tt.keywords)
				}
			}
		})
	}
	// The messages show the numbers exactly as written.
	got := issues(t, mustCompile(t, `{"maximum":9007199254740992}`), `9007199254740993`)
	if got[0].Message != "must be <= 9007199254740992, got 9007199254740993" {
		t.Errorf("message %q", got[0].Message)
	}
}

// Trap: exact arithmetic expands exponents: 1e999999 costs ~30 ms each time
// the library parses it. The guard bounds exponents at ±1000.
func TestTrapHugeExponent(t *testing.T) {
	s := mustCompile(t, `{"type":"array","items":{"type":"number","multipleOf":0.01}}`)
	in := "[" + strings.TrimSuffix(strings.Repeat("1e999999,", 200), ",") + "]"
	start := time.Now()
	got := issues(t, s, in)
	if len(got) != 1 || got[0].InstancePointer != "/0" || got[0].Keyword != "" {
		t.Errorf("issues %+v, want one at /0", got)
	}
	if d := time.Since(start); d > time.Second {
		t.Errorf("took %v", d)
	}
	if err := s.Validate([]byte(`[1e1000, -1E+1000, 1e+999]`)); err != nil {
		t.Errorf("exponents at the limit: %v", err)
	}
	if ge := gateError(t, `{"multipleOf":1e-999999}`); ge.Keyword != "multipleOf" {
		t.Errorf("gate: %v", ge)
	}
}

// Trap: patterns are RE2: lookahead, backreferences and \cC are refused;
// \s is narrower than ECMAScript's, which no compile step can catch.
func TestTrapPatternsAreRE2(t *testing.T) {
	for _, p := range []string{`(?=a)`, `(?!a)`, `(?<=a)`, `(a)\1`, `\cC`} {
		raw := fmt.Sprintf(`{"pattern":%q}`, p)
		if ge := gateError(t, raw); ge.Keyword != "pattern" {
			t.Errorf("%s: %v", raw, ge)
		}
	}
	s := mustCompile(t, `{"pattern":"^\\s$"}`)
	if err := s.Validate([]byte(`" "`)); err != nil {
		t.Errorf("space: %v", err)
	}
	// U+00A0 is whitespace in ECMAScript, not in RE2.
	if err := s.Validate([]byte(`"\u00a0"`)); err == nil {
		t.Errorf("RE2 \\s matched U+00A0: the documented difference is gone")
	}
}

// Trap: the library compiles a pattern on first use and stores it in the
// schema: two goroutines validating with one fresh schema race (go test
// -race catches this when warmPatterns is removed).
func TestTrapPatternCompiledBeforeSharing(t *testing.T) {
	for i := range 4 {
		// A schema no other test compiles, so it is fresh.
		s := mustCompile(t, fmt.Sprintf(`{"properties":{"a":{"pattern":"^x{%d}$"},"b":{"$ref":"#/properties/a"}}}`, i+1))
		in := []byte(fmt.Sprintf(`{"a":%q,"b":"y"}`, strings.Repeat("x", i+1)))
		var wg sync.WaitGroup
		for range 8 {
			wg.Go(func() {
				if err := s.Validate(in); err == nil {
					t.Errorf("b should fail the pattern")
				}
			})
		}
		wg.Wait()
	}
}

// Trap: format assertion. The library's default is annotation-only; the
// guard states it (SetAssertFormat(false)) so it cannot drift.
func TestTrapFormatIsAnnotation(t *testing.T) {
	if newCompiler().AssertFormat {
		t.Fatalf("newCompiler asserts formats")
	}
	tests := []struct{ format, instance string }{
		{"email", `"not an email"`},
		{"date-time", `"yesterday"`},
		{"uuid", `"1234"`},
		{"ipv4", `"999.1.1.1"`},
		{"uri", `"::"`},
		{"regex", `"("`},
		{"no-such-format", `"x"`},
		{"date", `5`},
	}
	for _, tt := range tests {
		t.Run(tt.format, func(t *testing.T) {
			s := mustCompile(t, fmt.Sprintf(`{"format":%q}`, tt.format))
			if err := s.Validate([]byte(tt.instance)); err != nil {
				t.Errorf("format %s refused %s: %v", tt.format, tt.instance, err)
			}
		})
	}
}

// Trap (found here): the library resolves "#/a/b" against the subschema
// holding the $ref before its parents, and "#/" to that subschema; the
// standard resolves both against the document root. bindRefs fixes the
// targets.
func TestTrapRefResolvedAgainstRoot(t *testing.T) {
	// /properties/a refers to the root's /properties/x (integer), but has a
	// /properties/x of its own (string).
	shadowed := `{"properties":{"x":{"type":"integer"},"a":{"properties":{"x":{"type":"string"}},"$ref":"#/properties/x"}}}`
	t.Run("library", func(t *testing.T) {
		s, err := newCompiler().Compile([]byte(shadowed))
		if err != nil || !s.Validate(map[string]any{"a": "str"}).IsValid() {
			t.Errorf("the library now resolves pointers against the root: bindRefs may be unnecessary (%v)", err)
		}
	})
	s := mustCompile(t, shadowed)
	if err := s.Validate([]byte(`{"a":5}`)); err != nil {
		t.Errorf(`{"a":5}: %v`, err)
	}
	if !hasIssue(issues(t, s, `{"a":"str"}`), "/a", "/properties/x/type", "type") {
		t.Errorf(`{"a":"str"} not refused by the root's /properties/x`)
	}

	// "#/properties/" is the root's property "" (a JSON pointer "/" is the
	// member named "").
	empty := mustCompile(t, `{"properties":{"":{"type":"integer"},"a":{"type":"string","$ref":"#/properties/"}}}`)
	if !hasIssue(issues(t, empty, `{"a":"s"}`), "/a", "/properties//type", "type") {
		t.Errorf(`ref to property "" not enforced`)
	}
}

// Trap (found here): "$ref": "" means no reference to the library.
func TestTrapEmptyRef(t *testing.T) {
	t.Run("library", func(t *testing.T) {
		s, err := newCompiler().Compile([]byte(`{"$ref":""}`))
		if err != nil || !s.Validate(1).IsValid() || len(s.UnresolvedReferenceURIs()) != 0 {
			t.Errorf("the library now treats an empty $ref differently: %v", err)
		}
	})
	if ge := gateError(t, `{"$ref":""}`); ge.Keyword != "$ref" {
		t.Errorf("keyword %q", ge.Keyword)
	}
}

// Trap (found here): draft-07 ignores keywords beside $ref, and the library
// follows that: an assertion there checks nothing.
func TestTrapDraft07RefSiblings(t *testing.T) {
	raw := `{"$schema":"http://json-schema.org/draft-07/schema#","definitions":{"a":{"type":"string"}},"properties":{"x":{"$ref":"#/definitions/a","minLength":5}}}`
	t.Run("library", func(t *testing.T) {
		s, err := newCompiler().Compile([]byte(raw))
		if err != nil || !s.Validate(map[string]any{"x": "ab"}).IsValid() {
			t.Errorf("the library now applies draft-07 $ref siblings: %v", err)
		}
	})
	if ge := gateError(t, raw); ge.Keyword != "minLength" || ge.Pointer != "/properties/x" {
		t.Errorf("gate: %v", ge)
	}
	// Draft-07 otherwise works, with its definitions.
	s := mustCompile(t, `{"$schema":"http://json-schema.org/draft-07/schema#","definitions":{"a":{"type":"string"}},"properties":{"x":{"allOf":[{"$ref":"#/definitions/a"},{"minLength":5}]}}}`)
	if !hasIssue(issues(t, s, `{"x":"ab"}`), "/x", "/properties/x/allOf/1/minLength", "minLength") {
		t.Errorf("draft-07 allOf not enforced")
	}
	if s.c.lib.Dialect() != jsonschema.Draft7 {
		t.Errorf("dialect %v", s.c.lib.Dialect())
	}
}

// Trap (found here): the library evaluates a missing required property's
// schema against null, so {} against {"properties":{"a":{"type":"string"}},
// "required":["a"]} also reports "a is null, not a string" at /a, a place
// that does not exist.
func TestTrapMissingRequiredNotEvaluated(t *testing.T) {
	s := mustCompile(t, `{"properties":{"a":{"type":"string"}},"required":["a"]}`)
	got := issues(t, s, `{}`)
	if len(got) != 1 || got[0].Keyword != "required" {
		t.Errorf("issues %+v, want only the required one", got)
	}
}

// Trap (found here): the library's messages print values with %v, so an
// object shows as map[...]; this package writes its own.
func TestTrapMessagesHaveNoGoValues(t *testing.T) {
	s := mustCompile(t, `{"enum":[{"a":1},[1,2]],"not":{"const":{"b":[true]}}}`)
	err := s.Validate([]byte(`{"b":[true]}`))
	var ve *ValidationError
	if !errors.As(err, &ve) {
		t.Fatalf("Validate: %v", err)
	}
	for _, is := range ve.Issues {
		for _, goish := range []string{"map[", "[]interface", "json.Number", "%!", "<nil>"} {
			if strings.Contains(is.Message, goish) {
				t.Errorf("message %q shows a Go value", is.Message)
			}
		}
	}
}
