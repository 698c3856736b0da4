package schema

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strings"
	"sync"
	"testing"
)

func TestCompileCached(t *testing.T) {
	raw := []byte(`{"type":"object","properties":{"cached":{"type":"string"}}}`)
	a := mustCompile(t, string(raw))
	b := mustCompile(t, string(raw))
	if a != b {
		t.Errorf("the same bytes compiled twice")
	}
	// The same schema laid out differently: one compiled form, each Raw as given.
	other := []byte("{ \"properties\": {\"cached\": {\"type\": \"string\"}},\n  \"type\": \"object\" }")
	c := mustCompile(t, string(other))
	if c.c != a.c {
		t.Errorf("canonically equal schemas compiled twice")
	}
	if !bytes.Equal(c.Raw(), other) || !bytes.Equal(a.Raw(), raw) {
		t.Errorf("Raw is not the bytes as given: %s / %s", c.Raw(), a.Raw())
	}
	if a.Hash() != c.Hash() || !bytes.Equal(a.Canonical(), c.Canonical()) {
		t.Errorf("hash or canonical form differ")
	}
	if got := string(a.Canonical()); got != `{"properties":{"cached":{"type":"string"}},"type":"object"}` {
		t.Errorf("canonical %s", got)
	}
	// The returned slices are copies.
	a.Raw()[0] = 'X'
	a.Canonical()[0] = 'X'
	if a.Raw()[0] != '{' || a.Canonical()[0] != '{' {
		t.Errorf("Raw or Canonical exposes internal bytes")
	}
	// Numbers stay as written in the canonical form, so 1 and 1.0 hash apart.
	if mustCompile(t, `{"maximum":1}`).Hash() == mustCompile(t, `{"maximum":1.0}`).Hash() {
		t.Errorf("numbers normalized in the canonical form")
	}
}

func TestHashIsSHA256OfCanonical(t *testing.T) {
	s := mustCompile(t, `{"type":"string"}`)
	sum := sha256.Sum256(s.Canonical())
	if s.Hash() != hex.EncodeToString(sum[:]) {
		t.Errorf("hash %s", s.Hash())
	}
}

func TestIsObjectType(t *testing.T) {
	tests := []struct {
		name   string
		schema string
		want   bool
	}{
		{"object", `{"type":"object","properties":{"a":{}}}`, true},
		{"object beside a ref", `{"$defs":{"o":{"type":"object"}},"$ref":"#/$defs/o","type":"object"}`, true},
		{"type array", `{"type":["object"]}`, false},
		{"object or null", `{"type":["object","null"]}`, false},
		{"no type", `{"properties":{"a":{}}}`, false},
		{"only through a ref", `{"$defs":{"o":{"type":"object"}},"$ref":"#/$defs/o"}`, false},
		{"string", `{"type":"string"}`, false},
		{"true", `true`, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := mustCompile(t, tt.schema).IsObjectType(); got != tt.want {
				t.Errorf("IsObjectType() = %v", got)
			}
		})
	}
}

func TestCanonicalEscapes(t *testing.T) {
	s := mustCompile(t, `{"description":"\u00e9\u0041\n\"\\\/<>&\u2028","const":{"b":1,"a":1}}`)
	want := `{"const":{"a":1,"b":1},"description":"éA\n\"\\/<>&` + "\u2028" + `"}`
	if got := string(s.Canonical()); got != want {
		t.Errorf("got  %s\nwant %s", got, want)
	}
}

// The cache keeps at most cacheItems schemas per level, dropping the least
// recently used: a schema pushed out compiles again, to a new *Schema.
func TestCacheBoundedByItems(t *testing.T) {
	first := []byte(`{"type":"object","properties":{"evicted":{"type":"string"}}}`)
	s := mustCompile(t, string(first))
	var last *Schema
	for i := range cacheItems {
		last = mustCompile(t, fmt.Sprintf(`{"type":"integer","minimum":%d,"$comment":"cache bound"}`, i))
	}
	if n, m := schemaCache.bytes.Len(), schemaCache.canonical.Len(); n > cacheItems || m > cacheItems {
		t.Fatalf("cache levels hold %d and %d entries, bound %d", n, m, cacheItems)
	}
	if again := mustCompile(t, string(first)); again == s {
		t.Errorf("the least recently used schema was kept past %d entries", cacheItems)
	}
	if again := mustCompile(t, `{"type":"integer","minimum":1023,"$comment":"cache bound"}`); again != last {
		t.Errorf("the most recent schema was evicted")
	}
}

// A schema above a quarter of the byte bound is compiled each time rather
// than pushing everything else out of the cache.
func TestCacheBoundedByBytes(t *testing.T) {
	small := mustCompile(t, `{"type":"object","properties":{"kept":{"type":"string"}}}`)
	huge := `{"type":"string","description":"` + strings.Repeat("x", cacheBytes/4) + `"}`
	a := mustCompile(t, huge)
	b := mustCompile(t, huge)
	if a == b || a.c == b.c {
		t.Errorf("a schema of %d bytes was cached, bound %d", len(huge), cacheBytes)
	}
	if again := mustCompile(t, `{"type":"object","properties":{"kept":{"type":"string"}}}`); again != small {
		t.Errorf("a huge schema evicted a small one")
	}
}

func TestCompileConcurrent(t *testing.T) {
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := range 50 {
				raw := fmt.Sprintf(`{"type":"object","properties":{"n%d":{"type":"integer","minimum":%d}}}`, i%10, g%3)
				s, err := Compile([]byte(raw))
				if err != nil {
					t.Errorf("Compile: %v", err)
					return
				}
				if err := s.Validate([]byte(fmt.Sprintf(`{"n%d":-1}`, i%10))); err == nil {
					t.Errorf("minimum not enforced")
				}
			}
		})
	}
	wg.Wait()
	if n, m := schemaCache.bytes.Len(), schemaCache.canonical.Len(); n > cacheItems || m > cacheItems {
		t.Errorf("cache levels hold %d and %d entries, bound %d", n, m, cacheItems)
	}
}
