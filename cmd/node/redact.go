package main

import (
	"bytes"
	"encoding/json"
	"io"

	"github.com/cairn-agents/cairn/api"
	"github.com/cairn-agents/cairn/runtime"
)

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
		out = api.RedactJSON(r.red, r.buf)
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
