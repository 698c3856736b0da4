package main

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"

	"github.com/cairn-agents/cairn/runtime"
)

// redactJSON redacts every string of a JSON document, keys included, on
// the decoded values, and encodes the document again. Redacting the
// encoded bytes would miss a secret that holds a character JSON escapes
// (& < > " \ and control characters: the escaped form no longer matches
// the pattern). A document that does not decode is redacted as text.
func redactJSON(red runtime.Redactor, data []byte) []byte {
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
func (x *api) writeView(w http.ResponseWriter, r *http.Request, status int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		x.log.Error("api: encode a view", "err", err)
		writeError(w, http.StatusInternalServerError, "internal", "the node could not encode the answer")
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	principal, _ := r.Context().Value(principalKey{}).(string)
	_, _ = w.Write(append(redactJSON(x.redactorFor(principal), b), '\n'))
}

// redactingWriter redacts what passes through it: text a line at a time
// (a secret has no newline), written as each line completes; with json,
// the whole output at Flush, as one JSON document redacted on its decoded
// strings.
type redactingWriter struct {
	w    io.Writer
	red  runtime.Redactor
	json bool
	buf  []byte
}

func (r *redactingWriter) Write(p []byte) (int, error) {
	r.buf = append(r.buf, p...)
	if r.json {
		return len(p), nil
	}
	if i := bytes.LastIndexByte(r.buf, '\n'); i >= 0 {
		if _, err := io.WriteString(r.w, r.red.Redact(string(r.buf[:i+1]))); err != nil {
			return 0, err
		}
		r.buf = append(r.buf[:0], r.buf[i+1:]...)
	}
	return len(p), nil
}

// Flush writes what is left.
func (r *redactingWriter) Flush() error {
	if len(r.buf) == 0 {
		return nil
	}
	var out []byte
	if r.json {
		out = redactJSON(r.red, r.buf)
		var pretty bytes.Buffer // as the command printed it: indented
		if bytes.Contains(r.buf, []byte("\n  ")) && json.Indent(&pretty, out, "", "  ") == nil {
			out = pretty.Bytes()
		}
		if bytes.HasSuffix(r.buf, []byte("\n")) {
			out = append(out, '\n')
		}
	} else {
		out = []byte(r.red.Redact(string(r.buf)))
	}
	r.buf = nil
	_, err := r.w.Write(out)
	return err
}
