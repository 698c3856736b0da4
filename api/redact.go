package api

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"io"
	"net/http"

	"github.com/cairn-agents/cairn/runtime"
)

// RedactJSON redacts every string of a JSON document, keys included, on
// the decoded values, and encodes the document again. Redacting the
// encoded bytes would miss a secret that holds a character JSON escapes
// (& < > " \ and control characters: the escaped form no longer matches
// the pattern). A document that does not decode is redacted as text.
func RedactJSON(red runtime.Redactor, data []byte) []byte {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	var out [][]byte
	for {
		var v any
		err := dec.Decode(&v)
		if err == io.EOF && len(out) > 0 {
			return bytes.Join(out, []byte("\n"))
		}
		if err != nil {
			return []byte(red.Redact(string(data)))
		}
		b, err := json.Marshal(redactValue(red, v))
		if err != nil {
			return []byte(red.Redact(string(data)))
		}
		out = append(out, b)
	}
}

func redactValue(red runtime.Redactor, v any) any {
	switch v := v.(type) {
	case string:
		if b, ok := redactBytes(red, v); ok {
			return b
		}
		return red.Redact(v)
	case []any:
		for i := range v {
			v[i] = redactValue(red, v[i])
		}
		return v
	case map[string]any:
		out := make(map[string]any, len(v))
		for k, e := range v {
			out[red.Redact(k)] = redactValue(red, e)
		}
		return out
	}
	return v
}

// writeView writes a view of runs (a run, its timeline, its transcript, a
// re-drive's report) as JSON, every string redacted: the log holds what
// the run saw, secrets a capability returned or a model echoed included,
// and no view hands them out, but to a principal granted raw values.
func (x *Server) writeView(w http.ResponseWriter, r *http.Request, status int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		x.log.Error("api: encode a view", "err", err)
		writeError(w, http.StatusInternalServerError, "internal", "the node could not encode the answer")
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	principal, _ := r.Context().Value(principalKey{}).(string)
	_, _ = w.Write(append(RedactJSON(x.redactorFor(principal), b), '\n'))
}

// redactBytes redacts a []byte field as JSON encodes it (standard base64,
// padded): when s decodes to bytes that hold a secret, they are redacted
// as text and encoded again, so that the view holds valid base64 of the
// redacted bytes (provider metadata, a response's model and id, is kept as
// bytes). ok is false for any other string.
func redactBytes(red runtime.Redactor, s string) (string, bool) {
	if len(s) < 8 || len(s)%4 != 0 {
		return "", false
	}
	b, err := base64.StdEncoding.DecodeString(s)
	if err != nil {
		return "", false
	}
	text := string(b)
	if r := red.Redact(text); r != text {
		return base64.StdEncoding.EncodeToString([]byte(r)), true
	}
	return "", false
}
