package schema

// outputPointer is where CompletionSchema embeds the output contract.
const outputPointer = "/oneOf/0/properties/output"

// completionDepth is the nesting the wrapper adds above the contract.
const completionDepth = 4

// CompletionSchema builds and compiles the discriminated completion schema
// (C39) around a definition's output contract. The model fills either
//
//	{"type":"output","output":<the output contract>}
//	{"type":"needs_input","question":<a string with a non-space character>}
//
// and nothing else validates: no extra properties, no missing fields, no
// mixing. The top level is "type":"object" (providers require object tool
// schemas) with a oneOf of the two forms:
//
//	{"type":"object","oneOf":[
//	  {"type":"object","properties":{"type":{"const":"output"},"output":<contract>},
//	   "required":["type","output"],"additionalProperties":false},
//	  {"type":"object","properties":{"type":{"const":"needs_input"},
//	   "question":{"type":"string","minLength":1,"pattern":"\\S"}},
//	   "required":["type","question"],"additionalProperties":false}]}
//
// The contract is embedded as the output schema's canonical form with each
// local $ref prefixed by /oneOf/0/properties/output so that it still
// resolves; nothing else in it changes. A contract's $schema is repeated at
// the top level (a nested $schema must name the root's dialect). The
// wrapper adds four levels of nesting, so an output schema nested deeper
// than 196 levels fails here. Errors match ErrGate.
func CompletionSchema(output *Schema) (*Schema, error) {
	if output == nil {
		return nil, gateErr("", "", "CompletionSchema needs an output schema")
	}
	b := []byte{'{'}
	if root, ok := output.c.doc.(map[string]any); ok {
		if d, ok := root["$schema"].(string); ok {
			b = append(b, `"$schema":`...)
			b = appendQuoted(b, d)
			b = append(b, ',')
		}
	}
	b = append(b, `"type":"object","oneOf":[{"type":"object","properties":{"type":{"const":"output"},"output":`...)
	b = appendCanonical(b, rewriteRefs(output.c.doc, outputPointer))
	b = append(b, `},"required":["type","output"],"additionalProperties":false},`...)
	b = append(b, `{"type":"object","properties":{"type":{"const":"needs_input"},"question":{"type":"string","minLength":1,"pattern":"\\S"}},"required":["type","question"],"additionalProperties":false}]}`...)
	return Compile(b)
}

// rewriteRefs returns a copy of the (gated) schema v with every $ref's
// pointer prefixed, for embedding v at prefix in another document.
func rewriteRefs(v any, prefix string) any {
	obj, ok := v.(map[string]any)
	if !ok {
		return v
	}
	out := make(map[string]any, len(obj))
	for k, val := range obj {
		switch vocabulary[k].shape {
		case schemaShape:
			out[k] = rewriteRefs(val, prefix)
		case schemaListShape:
			list := val.([]any)
			copied := make([]any, len(list))
			for i, sub := range list {
				copied[i] = rewriteRefs(sub, prefix)
			}
			out[k] = copied
		case schemaMapShape:
			m := val.(map[string]any)
			copied := make(map[string]any, len(m))
			for name, sub := range m {
				copied[name] = rewriteRefs(sub, prefix)
			}
			out[k] = copied
		default:
			if ref, ok := val.(string); ok && k == "$ref" {
				val = "#" + prefix + ref[1:]
			}
			out[k] = val
		}
	}
	return out
}
