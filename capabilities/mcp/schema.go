package mcp

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sort"
	"strings"

	"github.com/cairn-agents/cairn/runtime/schema"
)

// SchemaError says why a tool's input schema was refused at start: the
// server, the tool, and the gate's verdict (its JSON pointer and keyword).
type SchemaError struct {
	Server, Tool string
	// Keyword is the keyword at fault ("" when none is: malformed JSON,
	// a top level that is not an object schema).
	Keyword string
	// Pointer is the JSON pointer of the schema object holding Keyword.
	Pointer string
	Err     error
}

func (e *SchemaError) Error() string {
	if e.Keyword != "" {
		return fmt.Sprintf("mcp: server %s: tool %s: input schema: keyword %s at %s: %v", e.Server, e.Tool, e.Keyword, pointerText(e.Pointer), e.Err)
	}
	return fmt.Sprintf("mcp: server %s: tool %s: input schema: %v", e.Server, e.Tool, e.Err)
}

func (e *SchemaError) Unwrap() error { return e.Err }

func pointerText(p string) string {
	if p == "" {
		return "(root)"
	}
	return p
}

// errNotObject: MCP requires a tool's input schema to be an object schema.
var errNotObject = errors.New(`the top level must be {"type":"object",...} (MCP tool input)`)

// gateToolSchema converts a tool's input schema where an exact conversion
// exists (see convertSchema), then passes it through the schema gate. The
// bytes it returns are what arguments are validated against and what the
// model is shown; conversions lists what was rewritten, for the log.
func gateToolSchema(server, tool string, raw []byte) (json.RawMessage, []string, error) {
	fail := func(kw, ptr string, err error) error {
		return &SchemaError{Server: server, Tool: tool, Keyword: kw, Pointer: ptr, Err: err}
	}
	if len(bytes.TrimSpace(raw)) == 0 || string(raw) == "null" {
		return nil, nil, fail("", "", errNotObject)
	}
	out, conversions, cerr := convertSchema(raw)
	if cerr != nil {
		return nil, nil, fail(cerr.keyword, cerr.pointer, cerr)
	}
	s, err := schema.Compile(out)
	if err != nil {
		var g *schema.GateError
		if errors.As(err, &g) {
			return nil, nil, fail(g.Keyword, g.Pointer, err)
		}
		return nil, nil, fail("", "", err)
	}
	if !s.IsObjectType() {
		return nil, nil, fail("type", "", errNotObject)
	}
	return out, conversions, nil
}

// convertError is a keyword convertSchema cannot rewrite exactly.
type convertError struct {
	pointer, keyword, reason string
}

func (e *convertError) Error() string { return e.reason }

// convertSchema rewrites the keywords of an MCP tool's input schema that
// Cairn's gate does not accept into ones it does, only where the result
// accepts exactly the same instances (never a weaker schema):
//
//   - contentEncoding, contentMediaType, contentSchema: annotations in
//     draft-07 and 2020-12 (they assert nothing); removed.
//   - propertyNames whose schema accepts every string (true, {}, or
//     {"type":"string"} with only annotations beside it: what zod emits
//     for z.record(z.string(), ...)); removed, since every property name is
//     a string. Any other propertyNames is an error.
//   - if/then/else: replaced by one allOf entry
//     {"anyOf":[{"allOf":[IF,THEN]},{"allOf":[{"not":IF},ELSE]}]}, a
//     missing THEN or ELSE being true. then or else without if assert
//     nothing and are removed.
//   - dependentRequired {"a":["b"]}, dependentSchemas {"a":S} and, under
//     draft-07 only, dependencies (either form): one allOf entry per member,
//     {"anyOf":[{"not":{"required":["a"]}},{"required":["b"]}]} (or S).
//
// Everything else is left as it is, and the gate refuses what it does not
// support, naming the keyword. Numbers keep their text.
func convertSchema(raw []byte) ([]byte, []string, *convertError) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var doc any
	if err := dec.Decode(&doc); err != nil {
		return nil, nil, &convertError{reason: "not JSON: " + err.Error()}
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, nil, &convertError{reason: "not JSON: data after the schema"}
	}
	c := &converter{}
	if root, ok := doc.(map[string]any); ok {
		d, _ := root["$schema"].(string)
		c.draft07 = strings.HasPrefix(d, "http://json-schema.org/draft-07/schema")
	}
	doc, err := c.schema("", doc, 0)
	if err != nil {
		return nil, nil, err
	}
	if len(c.done) == 0 {
		return raw, nil, nil
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(doc); err != nil {
		return nil, nil, &convertError{reason: err.Error()}
	}
	return bytes.TrimRight(buf.Bytes(), "\n"), c.done, nil
}

type converter struct {
	done []string
	// draft07: dependencies is a keyword (2020-12 split it in two; there
	// it is unknown, and left for the gate to refuse).
	draft07 bool
}

// maxConvertDepth bounds recursion on hostile input; the gate's own limit
// (200) is lower, so nothing it accepts is cut short here.
const maxConvertDepth = 256

var (
	// subschema keywords holding one schema.
	oneSchema = []string{"additionalProperties", "items", "not", "if", "then", "else", "propertyNames",
		"contains", "additionalItems", "unevaluatedProperties", "unevaluatedItems", "contentSchema"}
	// keywords holding a list of schemas.
	listSchema = []string{"allOf", "anyOf", "oneOf", "prefixItems", "items"}
	// keywords holding a map of schemas.
	mapSchema = []string{"properties", "$defs", "definitions", "patternProperties", "dependentSchemas", "dependencies"}
)

func escape(tok string) string {
	return strings.NewReplacer("~", "~0", "/", "~1").Replace(tok)
}

func (c *converter) schema(ptr string, v any, depth int) (any, *convertError) {
	obj, ok := v.(map[string]any)
	if !ok {
		return v, nil // booleans, and non-schemas the gate will name
	}
	if depth > maxConvertDepth {
		return nil, &convertError{pointer: ptr, reason: "the schema is nested too deeply"}
	}
	// Children first, so a rewrite here sees converted subschemas.
	for _, kw := range oneSchema {
		if sub, ok := obj[kw].(map[string]any); ok {
			conv, err := c.schema(ptr+"/"+kw, sub, depth+1)
			if err != nil {
				return nil, err
			}
			obj[kw] = conv
		}
	}
	for _, kw := range listSchema {
		if list, ok := obj[kw].([]any); ok {
			for i, sub := range list {
				conv, err := c.schema(fmt.Sprintf("%s/%s/%d", ptr, kw, i), sub, depth+1)
				if err != nil {
					return nil, err
				}
				list[i] = conv
			}
		}
	}
	for _, kw := range mapSchema {
		if m, ok := obj[kw].(map[string]any); ok {
			for _, name := range sortedNames(m) {
				conv, err := c.schema(ptr+"/"+kw+"/"+escape(name), m[name], depth+1)
				if err != nil {
					return nil, err
				}
				m[name] = conv
			}
		}
	}
	at := pointerText(ptr)
	for _, kw := range []string{"contentEncoding", "contentMediaType", "contentSchema"} {
		if _, ok := obj[kw]; ok {
			delete(obj, kw)
			c.done = append(c.done, fmt.Sprintf("%s: removed %s (an annotation)", at, kw))
		}
	}
	if pn, ok := obj["propertyNames"]; ok {
		if !acceptsEveryString(pn) {
			return nil, &convertError{pointer: ptr, keyword: "propertyNames",
				reason: "propertyNames is not supported (only a propertyNames that accepts every string is removed)"}
		}
		delete(obj, "propertyNames")
		c.done = append(c.done, at+": removed propertyNames (it accepts every string)")
	}
	var extra []any
	cond, hasIf := obj["if"]
	th, hasThen := obj["then"]
	el, hasElse := obj["else"]
	switch {
	case hasIf:
		if !hasThen {
			th = true
		}
		if !hasElse {
			el = true
		}
		extra = append(extra, map[string]any{"anyOf": []any{
			map[string]any{"allOf": []any{cond, th}},
			map[string]any{"allOf": []any{map[string]any{"not": cond}, el}},
		}})
		c.done = append(c.done, at+": rewrote if/then/else as anyOf")
	case hasThen || hasElse:
		c.done = append(c.done, at+": removed then/else without if (they assert nothing)")
	}
	delete(obj, "if")
	delete(obj, "then")
	delete(obj, "else")
	for _, kw := range []string{"dependentRequired", "dependentSchemas", "dependencies"} {
		m, ok := obj[kw].(map[string]any)
		if !ok || (kw == "dependencies" && !c.draft07) {
			continue
		}
		for _, name := range sortedNames(m) {
			var then any
			switch dep := m[name].(type) {
			case []any:
				then = map[string]any{"required": dep}
			default:
				if kw == "dependentRequired" {
					return nil, &convertError{pointer: ptr, keyword: kw, reason: fmt.Sprintf("%s/%s is not an array of property names", kw, name)}
				}
				then = dep
			}
			extra = append(extra, map[string]any{"anyOf": []any{
				map[string]any{"not": map[string]any{"required": []any{name}}},
				then,
			}})
		}
		delete(obj, kw)
		c.done = append(c.done, fmt.Sprintf("%s: rewrote %s as anyOf", at, kw))
	}
	if len(extra) > 0 {
		if prev, ok := obj["allOf"].([]any); ok {
			obj["allOf"] = append(prev, extra...)
		} else if _, present := obj["allOf"]; present {
			return nil, &convertError{pointer: ptr, keyword: "allOf", reason: "allOf is not an array"}
		} else {
			obj["allOf"] = extra
		}
	}
	return obj, nil
}

// acceptsEveryString reports whether a propertyNames schema accepts every
// string: true, {}, or {"type":"string"} with only annotations beside it.
func acceptsEveryString(v any) bool {
	switch s := v.(type) {
	case bool:
		return s
	case map[string]any:
		for k, val := range s {
			switch k {
			case "type":
				if val != "string" {
					return false
				}
			case "description", "title", "$comment", "examples", "default", "deprecated", "readOnly", "writeOnly":
			default:
				return false
			}
		}
		return true
	}
	return false
}

func sortedNames(m map[string]any) []string {
	names := make([]string, 0, len(m))
	for k := range m {
		names = append(names, k)
	}
	sort.Strings(names)
	return names
}
