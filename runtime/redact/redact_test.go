package redact_test

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/cairn-agents/cairn/runtime/redact"
	"github.com/cairn-agents/cairn/runtime/redact/redacttest"
)

// secrets are the shapes a configured secret takes: a provider key, JSON-
// and HTML-special characters with a newline, non-ASCII, backslashes at
// either end, no unreserved byte at all (no anchor), a space inside.
var secrets = []struct{ name, value string }{
	{"provider key", "sk-proj-7Hq2Lm9Xv4Rt8Wz1aB3cD4eF5gH6"},
	{"specials and a newline", "sk-\"<&>'\\tail0123\nline2"},
	{"non-ASCII", "pässwörd-ünïcode-€-😀-42"},
	{"starts with a backslash", `\start-of-it-9f8e`},
	{"ends with a backslash", `end-of-it-9f8e\`},
	{"ends with two backslashes", `end-of-it-9f8e\\`},
	{"no unreserved byte", `"<&>\'!@#$%^*()`},
	{"a space and a plus", "correct horse+battery staple"},
	{"control bytes", "ctl\x01\x1b\x7fbytes-42"},
	{"short", "k-9999"},
}

// TestRedactEveryForm: each secret, spelled every way redacttest knows,
// inside other text and inside JSON, leaves no spelling behind.
func TestRedactEveryForm(t *testing.T) {
	for _, sec := range secrets {
		set := redact.New(sec.value)
		for _, f := range redacttest.Forms(sec.value) {
			t.Run(sec.name+"/"+f.Name, func(t *testing.T) {
				doc, _ := json.Marshal(map[string]string{"text": "the value is " + f.Text + "."})
				for _, text := range []string{f.Text, "before " + f.Text + " after", "x" + f.Text + f.Text + "y", string(doc)} {
					got := set.Redact(text)
					if found := redacttest.Find(got, sec.value); found != "" {
						t.Errorf("Redact(%q) = %q: the %s form is left", text, got, found)
					}
					if !strings.Contains(got, redact.Mark) {
						t.Errorf("Redact(%q) = %q: nothing redacted", text, got)
					}
				}
			})
		}
	}
}

// TestRedactAnyDepth: a value stringified again and again, by
// encoding/json and by JSON.stringify's rules in turn, is found at every
// depth, far past the four levels the old redactor's forms went.
func TestRedactAnyDepth(t *testing.T) {
	for _, sec := range secrets {
		set := redact.New(sec.value)
		text := sec.value
		for depth := 1; depth <= 9; depth++ {
			text = redacttest.JSONString(text, depth%2 == 0)
			if got := set.Redact(`{"v":"` + text + `"}`); strings.Contains(got, strings.Trim(text, `\`)) || !strings.Contains(got, redact.Mark) {
				t.Errorf("%s at depth %d: %.200q", sec.name, depth, got)
			}
		}
	}
}

// TestRedactKeepsJSONValid: a secret redacted inside JSON text, at any
// depth and between other escapes, leaves JSON that still decodes, level
// after level, to the text around the secret (a tool result is redacted as
// JSON text; one that no longer parsed would be handed on as a string). A
// backslash next to a secret that begins or ends with one may go with it:
// at depth 1 a neighbour's backslash and the secret's are four
// backslashes, as the secret's alone is at depth 2.
func TestRedactKeepsJSONValid(t *testing.T) {
	for _, sec := range secrets {
		set := redact.New(sec.value)
		value := `a"\` + sec.value + `\"b` + "\n"
		text := value
		for depth := 1; depth <= 5; depth++ {
			b, _ := json.Marshal(map[string]string{"v": text})
			text = string(b)
			got := set.Redact(text)
			// Decode every level down to the value.
			s := got
			for d := depth; d > 0; d-- {
				var m map[string]string
				if err := json.Unmarshal([]byte(s), &m); err != nil {
					t.Fatalf("%s at depth %d: level %d no longer decodes (%v): %q", sec.name, depth, d, err, got)
				}
				s = m["v"]
			}
			before, after, ok := strings.Cut(s, redact.Mark)
			if !ok || strings.TrimRight(before, `\\`) != `a"` || strings.TrimLeft(after, `\\`) != `"b`+"\n" {
				t.Errorf("%s at depth %d: decodes to %q, want %q", sec.name, depth, s, `a"\`+redact.Mark+`\"b`+"\n")
			}
		}
	}
}

// TestRedactLeavesOtherTextAlone: text that holds only part of a secret,
// or a near miss in any of its forms, is returned as it is.
func TestRedactLeavesOtherTextAlone(t *testing.T) {
	for _, sec := range secrets {
		set := redact.New(sec.value)
		v := sec.value
		var misses []string
		for _, cut := range []string{v[:len(v)-1], v[1:], v[:len(v)/2], v[len(v)/2:]} {
			if !utf8.ValidString(cut) {
				continue
			}
			for _, f := range redacttest.Forms(cut) {
				misses = append(misses, f.Text)
			}
		}
		// One byte changed, in the middle.
		b := []byte(v)
		b[len(b)/2] ^= 0x01
		if utf8.Valid(b) {
			misses = append(misses, string(b))
		}
		misses = append(misses, "", "Summarize the text.", `{"a":"b\"<c>","d":"\\\\"}`, "&quot;&lt;&#39;%22%5C")
		for _, text := range misses {
			if redacttest.Find(text, v) != "" {
				// A cut's encoding that spells the secret after all: the
				// JSON form of end\ is end\\; a cut's base64 can hold
				// the core when the byte cut off had the bits the core
				// shares with it.
				continue
			}
			if got := set.Redact(text); got != text {
				t.Errorf("%s: Redact(%q) = %q, want it unchanged", sec.name, text, got)
			}
		}
	}
}

// TestRedactLongestFirst: a secret that holds another is replaced whole.
func TestRedactLongestFirst(t *testing.T) {
	const tok = "tok-4f9c2a7e1b8d"
	set := redact.New(tok, "Bearer "+tok)
	if got := set.Redact("Authorization: Bearer " + tok + "; " + tok); got != "Authorization: [REDACTED]; [REDACTED]" {
		t.Fatalf("Redact = %q", got)
	}
	if set.Len() != 2 || redact.New("", tok, tok).Len() != 1 {
		t.Fatal("Len counts empty or repeated secrets")
	}
	var none *redact.Set
	if none.Redact("x") != "x" || (&redact.Set{}).Redact("x") != "x" {
		t.Fatal("a nil or zero Set changes text")
	}
}

// fuzzSecret makes a fuzzer's bytes into a secret the properties can hold
// for: valid UTF-8 (an encoder replaces invalid bytes, destroying the
// secret), trimmed (as runtime.NewSecrets trims), at least 6 bytes, not one byte repeated, without the brackets of
// redact.Mark, and no spelling of it inside the mark: otherwise the mark
// itself, or the mark and a neighbour, spells the secret again.
func fuzzSecret(b []byte) (string, bool) {
	s := string(b)
	if len(s) < 6 || len(s) > 200 || !utf8.ValidString(s) || strings.TrimSpace(s) != s || strings.ContainsAny(s, "[]") || strings.Count(s, s[:1]) == len(s) {
		return "", false
	}
	for _, f := range redacttest.Forms(s) {
		if strings.Contains(redact.Mark, f.Needle) {
			return "", false
		}
	}
	return s, true
}

// FuzzRedactEncodedForms: a random secret, spelled in each form between
// random text, leaves no spelling of itself behind.
func FuzzRedactEncodedForms(f *testing.F) {
	for _, sec := range secrets {
		f.Add([]byte(sec.value), "before ", " after")
	}
	f.Add([]byte(`a\"b\\c`), `\\`, `\"`)
	f.Add([]byte("x y\nz-long"), "%5C", "&#34;")
	f.Fuzz(func(t *testing.T, b []byte, prefix, suffix string) {
		sec, ok := fuzzSecret(b)
		if !ok {
			return
		}
		set := redact.New(sec)
		for _, form := range redacttest.Forms(sec) {
			text := prefix + form.Text + suffix
			if got := set.Redact(text); redacttest.Find(got, sec) != "" {
				t.Fatalf("secret %q, form %s: Redact(%q) = %q leaves the %s form", sec, form.Name, text, got, redacttest.Find(got, sec))
			}
		}
	})
}

// FuzzRedactTextWithoutSecret: text that cannot hold a secret (it lacks a
// byte of the secret's every textual form and of each base64 core) comes
// back unchanged.
func FuzzRedactTextWithoutSecret(f *testing.F) {
	f.Add([]byte("sk-proj-7Hq2Lm9Xv4Rt8Wz1"), "Summarize the text: sk-proj-7Hq2Lm9Xv4Rt8W, c2stcHJvai03SHEy")
	f.Add([]byte(`sk-"<&>\tail0123`), `{"a":"sk-\"\u003c\u0026\u003e\\tail012"}`)
	f.Fuzz(func(t *testing.T, b []byte, text string) {
		sec, ok := fuzzSecret(b)
		if !ok {
			return
		}
		text = withoutSecret(sec, text)
		if got := redact.New(sec).Redact(text); got != text {
			t.Fatalf("secret %q: Redact(%q) = %q, want it unchanged", sec, text, got)
		}
	})
}

// withoutSecret removes from text one unreserved byte of sec (every
// textual form keeps those as they are) and one byte of each base64 core,
// so that text holds no form of sec.
func withoutSecret(sec, text string) string {
	var drop []string
	for i := 0; i < len(sec); i++ {
		if c := sec[i]; 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '-' || c == '.' || c == '_' || c == '~' {
			drop = append(drop, sec[i:i+1])
			break
		}
	}
	if len(drop) == 0 {
		// No unreserved byte: drop every byte that can begin a form of
		// the secret's first character.
		drop = append(drop, "\\", "%", "&", "+", sec[:1])
		for _, f := range redacttest.Forms(sec[:1]) {
			drop = append(drop, f.Text[:1])
		}
	}
	for _, enc := range []*base64.Encoding{base64.StdEncoding, base64.URLEncoding} {
		for a := 0; a < 3; a++ {
			if _, core := redacttest.Base64(enc, sec, a); core != "" {
				drop = append(drop, core[len(core)/2:len(core)/2+1])
			}
		}
	}
	for _, d := range drop {
		text = strings.ReplaceAll(text, d, "")
	}
	return text
}

// TestRedactRandomEmbeddings is FuzzRedactEncodedForms's property over
// seeded random secrets and texts, in every `go test` run.
func TestRedactRandomEmbeddings(t *testing.T) {
	seed := uint64(rand.Int64())
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, seed))
	const alphabet = "abcXYZ019-._~ \n\t\"'<>&\\/%+=#;:{}éü€😀"
	runes := []rune(alphabet)
	word := func(n int) string {
		var b strings.Builder
		for range n {
			b.WriteRune(runes[rng.IntN(len(runes))])
		}
		return b.String()
	}
	for i := 0; i < 300; i++ {
		sec, ok := fuzzSecret([]byte(word(6 + rng.IntN(20))))
		if !ok {
			continue
		}
		set := redact.New(sec)
		forms := redacttest.Forms(sec)
		form := forms[rng.IntN(len(forms))]
		text := word(rng.IntN(30)) + form.Text + word(rng.IntN(30))
		if rng.IntN(2) == 0 {
			b, _ := json.Marshal(map[string]string{"v": text})
			text = string(b)
		}
		if got := set.Redact(text); redacttest.Find(got, sec) != "" {
			t.Fatalf("seed %d: secret %q, form %s: Redact(%q) = %q leaves the %s form", seed, sec, form.Name, text, got, redacttest.Find(got, sec))
		}
		clean := withoutSecret(sec, word(60))
		if got := set.Redact(clean); got != clean {
			t.Fatalf("seed %d: secret %q: Redact(%q) = %q, want it unchanged", seed, sec, clean, got)
		}
	}
}

func ExampleSet_Redact() {
	set := redact.New(`sk-"key"-Zx81QpLm27Vb`)
	fmt.Println(set.Redact(`{"args":"{\"key\":\"sk-\\\"key\\\"-Zx81QpLm27Vb\"}"}`))
	fmt.Println(set.Redact("https://example.com/?k=sk-%22key%22-Zx81QpLm27Vb"))
	// Output:
	// {"args":"{\"key\":\"[REDACTED]\"}"}
	// https://example.com/?k=[REDACTED]
}
