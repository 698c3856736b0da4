package runtime_test

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"

	"github.com/cairn-agents/cairn/runtime"
	"github.com/cairn-agents/cairn/runtime/redact/redacttest"
)

func TestNewSecrets(t *testing.T) {
	const key = "sk-proj-7Hq2Lm9Xv4Rt8Wz1"
	cases := []struct {
		name       string
		candidates map[string]string
		patterns   []string
		refused    []string // names, in order
	}{
		{"nothing configured", map[string]string{"OPENAI_API_KEY": "", "ANTHROPIC_API_KEY": "  "}, nil, nil},
		{"a real key", map[string]string{"OPENAI_API_KEY": key}, []string{key}, nil},
		{"a real key, space trimmed", map[string]string{"OPENAI_API_KEY": " " + key + "\n"}, []string{key}, nil},
		{"x", map[string]string{"OPENAI_API_KEY": "x"}, nil, []string{"OPENAI_API_KEY"}},
		{"none", map[string]string{"OPENAI_API_KEY": "none"}, nil, []string{"OPENAI_API_KEY"}},
		{"EMPTY (vLLM)", map[string]string{"OPENAI_API_KEY": "EMPTY"}, nil, []string{"OPENAI_API_KEY"}},
		{"dummy", map[string]string{"OPENAI_API_KEY": "dummy"}, nil, []string{"OPENAI_API_KEY"}},
		{"test", map[string]string{"OPENAI_API_KEY": "test"}, nil, []string{"OPENAI_API_KEY"}},
		{"local", map[string]string{"OPENAI_API_KEY": "local"}, nil, []string{"OPENAI_API_KEY"}},
		{"sk-no-key-required (llama.cpp), any case", map[string]string{"OPENAI_API_KEY": "SK-No-Key-Required"}, nil, []string{"OPENAI_API_KEY"}},
		{"ollama", map[string]string{"OPENAI_API_KEY": "ollama"}, nil, []string{"OPENAI_API_KEY"}},
		{"lm-studio", map[string]string{"OPENAI_API_KEY": "lm-studio"}, nil, []string{"OPENAI_API_KEY"}},
		{"changeme", map[string]string{"DB_PASSWORD": "changeme"}, nil, []string{"DB_PASSWORD"}},
		{"one character repeated", map[string]string{"OPENAI_API_KEY": "xxxxxxxxxxxx"}, nil, []string{"OPENAI_API_KEY"}},
		{"below the minimum", map[string]string{"API_KEY": "k-99"}, nil, []string{"API_KEY"}},
		{"at the minimum", map[string]string{"API_KEY": "k-9999"}, []string{"k-9999"}, nil},
		{"longest first, distinct, refusals by name",
			map[string]string{"H": "Bearer " + key, "H (token)": key, "OPENAI_API_KEY": key, "B": "none", "A": "x"},
			[]string{"Bearer " + key, key}, []string{"A", "B"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, refused := runtime.NewSecrets(c.candidates)
			if !slices.Equal([]string(got), c.patterns) {
				t.Errorf("patterns = %q, want %q", got, c.patterns)
			}
			var names []string
			for _, r := range refused {
				names = append(names, r.Name)
				for _, v := range c.candidates {
					if v := strings.TrimSpace(v); v != "" && (strings.Contains(r.Reason, v) || strings.Contains(r.String(), ": "+v)) {
						t.Errorf("the refusal %q shows the value %q", r, v)
					}
				}
				if !strings.HasPrefix(r.String(), r.Name+": not used as a redaction pattern: ") {
					t.Errorf("refusal = %q", r)
				}
			}
			if !slices.Equal(names, c.refused) {
				t.Errorf("refused = %q, want %q", names, c.refused)
			}
		})
	}
}

// TestNewSecretsPlaceholdersDoNotCorruptText: the text that the old
// redactor corrupted with placeholder keys passes unchanged; a real key in
// it is still redacted whole.
func TestNewSecretsPlaceholdersDoNotCorruptText(t *testing.T) {
	const key = "sk-ant-api03-Zx81QpLm27Vb"
	cand := map[string]string{"OPENAI_API_KEY": "x", "OPENAI_BASE_KEY": "EMPTY", "A": "none", "B": "test", "C": "local", "D": "dummy", "ANTHROPIC_API_KEY": key}
	red, _ := runtime.NewSecrets(cand)
	for _, text := range []string{"Summarize the text.", "Is none of the wall visible?", "A local test with a dummy value, EMPTY or not."} {
		if got := red.Redact(text); got != text {
			t.Errorf("Redact(%q) = %q", text, got)
		}
	}
	if got := red.Redact("use " + key + " now"); got != "use [REDACTED] now" {
		t.Errorf("the real key: %q", got)
	}
	// The old behaviour, for the record: every value a pattern.
	if got := (runtime.Secrets{"x"}).Redact("Summarize the text."); got != "Summarize the te[REDACTED]t." {
		t.Errorf("Secrets.Redact semantics changed: %q", got)
	}
}

// With no candidate at all, NewSecrets is still a redactor the loop takes:
// a nil Secrets is a typed nil in runtime.Input.Redactor, which the loop
// refuses (the node's runs all failed "Redactor: is required" with no
// provider key in the environment).
func TestNewSecretsWithNothingIsARedactor(t *testing.T) {
	s, _ := runtime.NewSecrets(nil)
	if s == nil {
		t.Fatal("NewSecrets(nil) is nil")
	}
	if got := s.Redact("text"); got != "text" {
		t.Fatalf("Redact = %q", got)
	}
}

// A secret with characters JSON escapes is redacted where it appears only
// escaped: a run_js result is a JSON text inside the transcript (found by
// the planted-secret suite: the model got it back in a tool result, and
// every view showed it).
func TestSecretsRedactEscapedForms(t *testing.T) {
	const sec = `sk-proj-"<&>\tail0123`
	s, _ := runtime.NewSecrets(map[string]string{"KEY": sec})
	goJSON, _ := json.Marshal(map[string]string{"result": sec})
	twice, _ := json.Marshal(map[string]string{"args": string(goJSON)})
	var js strings.Builder // JSON.stringify: <>& as they are
	enc := json.NewEncoder(&js)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(map[string]string{"result": sec})
	for _, text := range []string{sec, string(goJSON), string(twice), js.String(), "a " + sec + " b " + string(goJSON)} {
		if got := s.Redact(text); strings.Contains(got, "tail0123") || !strings.Contains(got, "[REDACTED]") {
			t.Errorf("Redact(%s) = %s", text, got)
		}
	}
	if got := s.Redact(`{"a":"b\"<c>"}`); got != `{"a":"b\"<c>"}` {
		t.Errorf("a text without the secret changed: %s", got)
	}
}

// TestSecretsRedactEveryForm (issue 49): a secret is redacted in every form
// redacttest spells it: JSON-escaped three and four levels deep (a script's
// JSON.stringify(JSON.stringify(s)) inside the transcript), percent-encoded,
// with HTML entities, and as base64 at each alignment. Before, only the raw
// form and one or two JSON levels were.
func TestSecretsRedactEveryForm(t *testing.T) {
	const sec = "sk-proj-\"<&>'\\tail0123\nline2"
	s, _ := runtime.NewSecrets(map[string]string{"KEY": sec})
	for _, f := range redacttest.Forms(sec) {
		text := "a " + f.Text + " b"
		if got := s.Redact(text); redacttest.Find(got, sec) != "" {
			t.Errorf("%s: Redact(%q) = %q", f.Name, text, got)
		}
	}
	if got := s.Compile().Redact("x " + sec); got != "x [REDACTED]" {
		t.Errorf("Compile().Redact = %q", got)
	}
}
