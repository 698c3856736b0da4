package schema

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"

	"github.com/go-json-experiment/json/jsontext"
)

// Limits on the JSON this package reads. They bound the work one schema or
// one instance can cause; real schemas and model output stay far below them.
const (
	// maxSchemaDepth is the deepest nesting of arrays and objects accepted in
	// a schema document.
	maxSchemaDepth = 200
	// maxInstanceDepth is the same for instances. The library's cycle check
	// and the error collection are quadratic in depth: 10,000 levels (the
	// JSON decoder's own limit) take seconds, 1000 a few milliseconds.
	maxInstanceDepth = 1000
	// maxNumberLen is the longest number literal accepted, in bytes.
	maxNumberLen = 1000
	// maxExponent bounds the absolute value of a number's exponent
	// ("1e400" is fine, "1e999999" is not). Exact arithmetic (big.Rat)
	// expands the exponent, so 1e999999 costs ~30 ms each time the library
	// compares it; a few hundred of those in one instance would stall a run.
	maxExponent = 1000
)

// jsonError is a problem found while reading JSON: Pointer locates it.
type jsonError struct {
	Pointer   string
	Reason    string
	Malformed bool // not JSON at all, as opposed to JSON outside a limit
}

func (e *jsonError) Error() string { return e.Reason }

// decodeJSON reads exactly one JSON value. Objects become map[string]any,
// arrays []any, numbers json.Number holding the literal as written (so no
// precision is lost), strings string, and true/false/null bool and nil.
// Duplicate object names and invalid UTF-8 are malformed (the JSON decoder
// of the library rejects them too). maxDepth bounds the nesting. With limitNumbers, numbers beyond maxNumberLen or
// maxExponent are refused (the gate checks a schema's numbers itself, to
// name the keyword).
func decodeJSON(data []byte, maxDepth int, limitNumbers bool) (any, *jsonError) {
	d := jsontext.NewDecoder(bytes.NewReader(data))
	r := reader{d: d, maxDepth: maxDepth, limitNumbers: limitNumbers}
	v, err := r.value(0)
	if err != nil {
		return nil, err
	}
	if _, err := d.ReadToken(); err != io.EOF {
		return nil, malformed(err, "unexpected data after the JSON value")
	}
	return v, nil
}

type reader struct {
	d            *jsontext.Decoder
	maxDepth     int
	limitNumbers bool
}

func malformed(err error, fallback string) *jsonError {
	msg := fallback
	ptr := ""
	var se *jsontext.SyntacticError
	if errors.As(err, &se) {
		ptr = string(se.JSONPointer)
		msg = se.Err.Error()
	} else if err == io.EOF || errors.Is(err, io.ErrUnexpectedEOF) {
		msg = "unexpected end of input"
	}
	return &jsonError{Pointer: ptr, Reason: "malformed JSON: " + msg, Malformed: true}
}

func (r *reader) value(depth int) (any, *jsonError) {
	tok, err := r.d.ReadToken()
	if err != nil {
		return nil, malformed(err, "unreadable value")
	}
	switch tok.Kind() {
	case 'n':
		return nil, nil
	case 'f':
		return false, nil
	case 't':
		return true, nil
	case '"':
		return tok.String(), nil
	case '0':
		lit := tok.String()
		if reason := checkNumberLiteral(lit); reason != "" && r.limitNumbers {
			return nil, &jsonError{Pointer: string(r.d.StackPointer()), Reason: reason}
		}
		return json.Number(lit), nil
	case '{':
		if depth >= r.maxDepth {
			return nil, r.tooDeep()
		}
		m := map[string]any{}
		for r.d.PeekKind() != '}' {
			tok, err := r.d.ReadToken()
			if err != nil {
				return nil, malformed(err, "unreadable object")
			}
			name := tok.String() // before the next read voids tok
			v, jerr := r.value(depth + 1)
			if jerr != nil {
				return nil, jerr
			}
			m[name] = v
		}
		if _, err := r.d.ReadToken(); err != nil {
			return nil, malformed(err, "unterminated object")
		}
		return m, nil
	case '[':
		if depth >= r.maxDepth {
			return nil, r.tooDeep()
		}
		a := []any{}
		for r.d.PeekKind() != ']' {
			v, jerr := r.value(depth + 1)
			if jerr != nil {
				return nil, jerr
			}
			a = append(a, v)
		}
		if _, err := r.d.ReadToken(); err != nil {
			return nil, malformed(err, "unterminated array")
		}
		return a, nil
	}
	return nil, &jsonError{Reason: "malformed JSON: unexpected token", Malformed: true}
}

func (r *reader) tooDeep() *jsonError {
	return &jsonError{Pointer: string(r.d.StackPointer()), Reason: fmt.Sprintf("nested deeper than %d levels", r.maxDepth)}
}

// checkNumberLiteral enforces maxNumberLen and maxExponent on a number
// literal that the JSON decoder already accepted as valid syntax.
func checkNumberLiteral(lit string) string {
	if len(lit) > maxNumberLen {
		return fmt.Sprintf("number literal is longer than %d characters", maxNumberLen)
	}
	i := strings.IndexAny(lit, "eE")
	if i < 0 {
		return ""
	}
	exp := strings.TrimLeft(lit[i+1:], "+-")
	exp = strings.TrimLeft(exp, "0")
	n := 0
	for _, c := range exp {
		n = n*10 + int(c-'0')
		if n > maxExponent {
			return fmt.Sprintf("number %s has an exponent beyond ±%d", clip(lit, 40), maxExponent)
		}
	}
	return ""
}

// checkNumbers applies checkNumberLiteral to every number inside v.
func checkNumbers(v any) string {
	switch v := v.(type) {
	case json.Number:
		return checkNumberLiteral(string(v))
	case []any:
		for _, e := range v {
			if r := checkNumbers(e); r != "" {
				return r
			}
		}
	case map[string]any:
		for _, k := range sortedKeys(v) {
			if r := checkNumbers(v[k]); r != "" {
				return r
			}
		}
	}
	return ""
}

// appendCanonical appends the canonical encoding of v: no insignificant
// whitespace, object members sorted by name (byte order of the UTF-8
// encoding, which is code point order), strings in the JSON encoder's
// minimal escaping, numbers exactly as written.
func appendCanonical(b []byte, v any) []byte {
	switch v := v.(type) {
	case nil:
		return append(b, "null"...)
	case bool:
		if v {
			return append(b, "true"...)
		}
		return append(b, "false"...)
	case json.Number:
		return append(b, v...)
	case string:
		return appendQuoted(b, v)
	case []any:
		b = append(b, '[')
		for i, e := range v {
			if i > 0 {
				b = append(b, ',')
			}
			b = appendCanonical(b, e)
		}
		return append(b, ']')
	case map[string]any:
		b = append(b, '{')
		for i, k := range sortedKeys(v) {
			if i > 0 {
				b = append(b, ',')
			}
			b = appendQuoted(b, k)
			b = append(b, ':')
			b = appendCanonical(b, v[k])
		}
		return append(b, '}')
	}
	panic(fmt.Sprintf("schema: appendCanonical: unexpected %T", v)) // decodeJSON produces none
}

func appendQuoted(b []byte, s string) []byte {
	out, err := jsontext.AppendQuote(b, s)
	if err != nil { // invalid UTF-8: impossible for decoded strings
		panic("schema: " + err.Error())
	}
	return out
}

func sortedKeys(m map[string]any) []string {
	return slices.Sorted(maps.Keys(m))
}

// jsonType names the JSON type of a decoded value, with "integer" for
// numbers without a fractional part (as JSON Schema's "type" sees them).
func jsonType(v any) string {
	switch v := v.(type) {
	case nil:
		return "null"
	case bool:
		return "boolean"
	case string:
		return "string"
	case []any:
		return "array"
	case map[string]any:
		return "object"
	case json.Number:
		if r, ok := parseRat(v); ok && r.IsInt() {
			return "integer"
		}
		return "number"
	}
	return fmt.Sprintf("%T", v)
}

// compact renders v as canonical JSON clipped to n bytes, for messages.
func compact(v any, n int) string {
	return clip(string(appendCanonical(nil, v)), n)
}

// clip shortens s to at most n bytes (on a rune boundary) and marks the cut.
func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	cut := n
	for cut > 0 && s[cut]&0xC0 == 0x80 {
		cut--
	}
	return s[:cut] + "…"
}

// Pointers are kept as token slices and formatted per RFC 6901.

func formatPointer(tokens []string) string {
	var b strings.Builder
	for _, t := range tokens {
		b.WriteByte('/')
		b.WriteString(escapeToken(t))
	}
	return b.String()
}

var tokenEscaper = strings.NewReplacer("~", "~0", "/", "~1")

func escapeToken(t string) string {
	if !strings.ContainsAny(t, "~/") {
		return t
	}
	return tokenEscaper.Replace(t)
}

// parsePointer splits an RFC 6901 pointer ("" or "/a/b") into tokens.
func parsePointer(p string) ([]string, error) {
	if p == "" {
		return nil, nil
	}
	if p[0] != '/' {
		return nil, errors.New("a JSON pointer starts with /")
	}
	parts := strings.Split(p[1:], "/")
	for i, part := range parts {
		if !strings.Contains(part, "~") {
			continue
		}
		var b strings.Builder
		for j := 0; j < len(part); j++ {
			if part[j] != '~' {
				b.WriteByte(part[j])
				continue
			}
			if j+1 >= len(part) || (part[j+1] != '0' && part[j+1] != '1') {
				return nil, fmt.Errorf("bad escape in token %q: ~ must be followed by 0 or 1", part)
			}
			if part[j+1] == '0' {
				b.WriteByte('~')
			} else {
				b.WriteByte('/')
			}
			j++
		}
		parts[i] = b.String()
	}
	return parts, nil
}

// lookup returns the value at the pointer tokens inside a decoded document.
func lookup(doc any, tokens []string) (any, bool) {
	cur := doc
	for _, t := range tokens {
		switch c := cur.(type) {
		case map[string]any:
			v, ok := c[t]
			if !ok {
				return nil, false
			}
			cur = v
		case []any:
			i, ok := arrayIndex(t)
			if !ok || i >= len(c) {
				return nil, false
			}
			cur = c[i]
		default:
			return nil, false
		}
	}
	return cur, true
}

// arrayIndex parses an RFC 6901 array index: digits, no leading zeros.
func arrayIndex(t string) (int, bool) {
	if t == "" || len(t) > 9 || (len(t) > 1 && t[0] == '0') {
		return 0, false
	}
	n := 0
	for _, c := range []byte(t) {
		if c < '0' || c > '9' {
			return 0, false
		}
		n = n*10 + int(c-'0')
	}
	return n, true
}

func appendToken(tokens []string, more ...string) []string {
	out := make([]string, 0, len(tokens)+len(more))
	return append(append(out, tokens...), more...)
}
