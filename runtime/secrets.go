package runtime

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
)

// MinSecretBytes is the length below which NewSecrets refuses a value as a
// redaction pattern. Redaction replaces every occurrence of a pattern, in
// prompts and tool results as much as in logs, so a short value corrupts
// ordinary text wherever it occurs as a substring ("x", "test" and "EMPTY"
// turn "Summarize the text" into "Summarize the te[REDACTED]t"). The real
// credentials a node holds are far longer (provider API keys are 40 bytes
// and more, tokens 20 and more), and the placeholders local setups use
// most ("x", "none", "EMPTY", "dummy", "test") are at most 5 bytes. The
// bound is not higher because short tokens and passwords do occur in MCP
// server configurations, and leaking one to a model is worse than the rare
// corruption it causes; longer placeholders are refused by name
// (Placeholders).
const MinSecretBytes = 6

// Placeholders are the values, compared without case after trimming space,
// that local model servers and examples use in place of a key (OpenAI
// compatible servers such as llama.cpp, vLLM, Ollama and LM Studio accept
// any key). They are not secrets, and as patterns they would corrupt text.
// The short ones are refused by MinSecretBytes already; they are listed so
// that the warning says what they are.
var Placeholders = []string{
	"x", "none", "null", "nil", "empty", "dummy", "test", "local", "fake",
	"key", "token", "secret", "password", "changeme", "placeholder",
	"not-needed", "no-key", "apikey", "api-key", "api_key", "your-api-key",
	"sk-no-key-required", "sk-dummy", "sk-test", "sk-fake", "sk-local",
	"ollama", "lm-studio", "lmstudio", "vllm", "llama.cpp",
}

// RefusedSecret is a candidate NewSecrets did not turn into a pattern. It
// names the candidate, never its value.
type RefusedSecret struct {
	// Name is the candidate's name: the environment variable, header or
	// setting it came from.
	Name string
	// Reason says why the value cannot be a secret.
	Reason string
}

func (r RefusedSecret) String() string {
	return r.Name + ": not used as a redaction pattern: " + r.Reason
}

// NewSecrets builds the redaction set from named candidate values (an
// environment variable's name and value, say). An empty value is skipped
// silently: nothing is configured. A value is refused, with a RefusedSecret
// naming it, when after trimming space it is shorter than MinSecretBytes,
// is one of Placeholders (case-insensitive), or is a single character
// repeated ("xxxxxxxx"). Every other value, trimmed, becomes a pattern; the
// patterns are distinct and ordered longest first, so that a value that
// holds another ("Bearer <token>" and <token>) is replaced whole. The
// refusals are ordered by name.
func NewSecrets(candidates map[string]string) (Secrets, []RefusedSecret) {
	// Never nil, even with no pattern: the loop refuses a nil Redactor, and
	// a nil Secrets in the interface is one.
	out := Secrets{}
	var refused []RefusedSecret
	seen := map[string]bool{}
	for name, v := range candidates {
		v = strings.TrimSpace(v)
		if v == "" {
			continue
		}
		if reason := notSecret(v); reason != "" {
			refused = append(refused, RefusedSecret{Name: name, Reason: reason})
			continue
		}
		if !seen[v] {
			seen[v] = true
			out = append(out, v)
		}
	}
	slices.SortFunc(out, func(a, b string) int {
		if c := cmp.Compare(len(b), len(a)); c != 0 {
			return c
		}
		return strings.Compare(a, b)
	})
	slices.SortFunc(refused, func(a, b RefusedSecret) int { return strings.Compare(a.Name, b.Name) })
	return out, refused
}

// notSecret says why a trimmed, non-empty value cannot be a secret, or ""
// when it can.
func notSecret(v string) string {
	for _, p := range Placeholders {
		if strings.EqualFold(v, p) {
			return "the value is a well-known placeholder, not a secret"
		}
	}
	if len(v) < MinSecretBytes {
		return fmt.Sprintf("the value is shorter than %d bytes and would corrupt ordinary text", MinSecretBytes)
	}
	if strings.Count(v, v[:1]) == len(v) {
		return "the value is one character repeated, a placeholder"
	}
	return ""
}
