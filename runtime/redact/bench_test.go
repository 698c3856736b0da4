package redact_test

import (
	"cmp"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/cairn-agents/cairn/runtime/redact"
)

// legacyRedact is runtime.Secrets.Redact as it was before this package (at
// 9b64274): each secret, and for one with characters JSON escapes its
// escaped forms one and two levels deep, replaced with strings.ReplaceAll.
// It is here to be measured against.
func legacyRedact(secrets []string, text string) string {
	for _, sec := range secrets {
		if strings.ContainsAny(sec, "\"\\<>&\x00\x01\x02\x03\x04\x05\x06\x07\x08\t\n\v\f\r") {
			one := []string{legacyJSON(sec, true), legacyJSON(sec, false)}
			var forms []string
			for _, f := range one {
				forms = append(forms, legacyJSON(f, true), legacyJSON(f, false))
			}
			forms = append(forms, one...)
			slices.SortStableFunc(forms, func(a, b string) int { return cmp.Compare(len(b), len(a)) })
			for _, f := range forms {
				text = strings.ReplaceAll(text, f, redact.Mark)
			}
		}
		text = strings.ReplaceAll(text, sec, redact.Mark)
	}
	return text
}

func legacyJSON(s string, html bool) string {
	var b strings.Builder
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(html)
	_ = enc.Encode(s)
	out := strings.TrimSuffix(b.String(), "\n")
	return out[1 : len(out)-1]
}

// nodeSecrets are what a node's registry typically holds: two provider
// keys, the embedded server's two passwords, the route secret, two API
// tokens, an MCP server's bearer token and a payload key.
var nodeSecrets = []string{
	"sk-proj-7Hq2Lm9Xv4Rt8Wz1aB3cD4eF5gH6iJ7kL8mN9oP0qR1sT2uV3wX4yZ5",
	"sk-ant-api03-Zx81QpLm27VbNc46Xs93KdJf02HgTr57YuIo18PlMk",
	"4f9c2a7e1b8d60534f9c2a7e1b8d60534f9c2a7e1b8d60534f9c2a7e1b8d6053",
	"9b8d60534f9c2a7e1b8d60534f9c2a7e1b8d60534f9c2a7e1b8d60534f9c2a7e",
	"route-secret-Lm27VbNc46Xs93Kd",
	"tok-alice-4f9c2a7e1b8d6053",
	"tok-bob-9c2a7e1b8d60534f",
	"ghp_Zx81QpLm27VbNc46Xs93KdJf02HgTr57YuIo",
	"q2Lm9Xv4Rt8Wz1aB3cD4eF5gH6iJ7kL8mN9oP0qR1sT=",
}

// transcript is a run's transcript as a view serves it, about 64 KiB:
// user and assistant text, run_js calls with their code, and their JSON
// results (JSON inside JSON).
func transcript(withSecret string) string {
	type part struct {
		Type string `json:"type"`
		Text string `json:"text,omitempty"`
		Args string `json:"args,omitempty"`
	}
	var msgs []map[string]any
	for i := 0; len(msgs) < 400; i++ {
		result, _ := json.Marshal(map[string]any{"rows": []map[string]any{{"id": i, "name": fmt.Sprintf("item %d", i), "note": "a value the script read back from the store"}}})
		text := fmt.Sprintf("Step %d: I will read the next page of results and summarize what changed since the previous one.", i)
		if withSecret != "" && i == 200 {
			text += " The key is " + withSecret + "."
		}
		msgs = append(msgs,
			map[string]any{"role": "assistant", "parts": []part{{Type: "text", Text: text}, {Type: "tool_call", Args: `{"code":"const r = await caps.kv.get({key: \"page-` + fmt.Sprint(i) + `\"});\nreturn r.value;"}`}}},
			map[string]any{"role": "tool", "parts": []part{{Type: "tool_result", Text: string(result)}}})
	}
	b, _ := json.Marshal(map[string]any{"messages": msgs})
	return string(b)
}

// BenchmarkRedact measures a transcript redacted with a node's secrets,
// by the legacy redactor and by a Set: a clean transcript (the common
// case, nothing to replace) and one that holds a secret once. The
// legacy/new ratio is the cost of the forms matched now.
//
//	go test -run '^$' -bench Redact -count 6 ./runtime/redact
func BenchmarkRedact(b *testing.B) {
	for _, c := range []struct {
		name   string
		secret string
	}{{"clean", ""}, {"one-secret", nodeSecrets[0]}, {"one-special-secret", `sk-"<&>\tail0123-4f9c2a7e`}} {
		secrets := append([]string{}, nodeSecrets...)
		if c.secret != "" && !slices.Contains(secrets, c.secret) {
			secrets = append(secrets, c.secret)
		}
		text := transcript(c.secret)
		b.Run(c.name+"/legacy", func(b *testing.B) {
			b.SetBytes(int64(len(text)))
			for b.Loop() {
				legacyRedact(secrets, text)
			}
		})
		set := redact.New(secrets...)
		b.Run(c.name+"/set", func(b *testing.B) {
			b.SetBytes(int64(len(text)))
			for b.Loop() {
				set.Redact(text)
			}
		})
	}
}

// TestBenchmarkTranscriptIsRedactedAlike: the two redactors agree on the
// benchmark's texts (what is measured is the same work).
func TestBenchmarkTranscriptIsRedactedAlike(t *testing.T) {
	for _, sec := range []string{"", nodeSecrets[0], `sk-"<&>\tail0123-4f9c2a7e`} {
		secrets := append(append([]string{}, nodeSecrets...), sec)
		text := transcript(sec)
		if got, want := redact.New(secrets...).Redact(text), legacyRedact(secrets[:len(secrets)-1], text); sec != "" && strings.Contains(got, sec) || sec == "" && got != want {
			t.Errorf("secret %q: the set's redaction differs", sec)
		}
	}
}
