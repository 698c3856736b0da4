package schema

import (
	"fmt"
	"strings"
	"unicode/utf8"

	"github.com/kaptinlin/jsonschema"
)

// The library's own messages print instance values with %v (Go maps and
// slices, such as "map[a:1]"); these are written for the model instead,
// from the keyword's value in the schema and the offending value.

// msg is what a message is made from.
type msg struct {
	want any // the keyword's value in the schema
	got  any // the instance value
	err  *jsonschema.EvaluationError
}

var messages = map[string]func(m msg) string{
	"type": func(m msg) string {
		return "expected " + typeList(m.want) + ", got " + jsonType(m.got)
	},
	"enum": func(m msg) string {
		return "must be one of " + valueList(m.want) + ", got " + compact(m.got, 60)
	},
	"const": func(m msg) string {
		return "must be " + compact(m.want, 100) + ", got " + compact(m.got, 60)
	},
	"required": func(m msg) string {
		obj, _ := m.got.(map[string]any)
		var missing []string
		names, _ := m.want.([]any)
		for _, n := range names {
			if s, ok := n.(string); ok {
				if _, present := obj[s]; !present {
					missing = append(missing, quote(s))
				}
			}
		}
		if len(missing) == 1 {
			return "missing required property " + missing[0]
		}
		return "missing required properties " + strings.Join(missing, ", ")
	},
	"minimum":          bound(">="),
	"maximum":          bound("<="),
	"exclusiveMinimum": bound(">"),
	"exclusiveMaximum": bound("<"),
	"multipleOf": func(m msg) string {
		return fmt.Sprintf("must be a multiple of %s, got %s", m.want, compact(m.got, 60))
	},
	"minLength": func(m msg) string {
		s, _ := m.got.(string)
		return fmt.Sprintf("string is shorter than %s characters (has %d)", m.want, utf8.RuneCountInString(s))
	},
	"maxLength": func(m msg) string {
		s, _ := m.got.(string)
		return fmt.Sprintf("string is longer than %s characters (has %d)", m.want, utf8.RuneCountInString(s))
	},
	"minItems": func(m msg) string {
		a, _ := m.got.([]any)
		return fmt.Sprintf("array has fewer than %s items (has %d)", m.want, len(a))
	},
	"maxItems": func(m msg) string {
		a, _ := m.got.([]any)
		return fmt.Sprintf("array has more than %s items (has %d)", m.want, len(a))
	},
	"minProperties": func(m msg) string {
		o, _ := m.got.(map[string]any)
		return fmt.Sprintf("object has fewer than %s properties (has %d)", m.want, len(o))
	},
	"maxProperties": func(m msg) string {
		o, _ := m.got.(map[string]any)
		return fmt.Sprintf("object has more than %s properties (has %d)", m.want, len(o))
	},
	"uniqueItems": func(m msg) string {
		if m.err != nil && m.err.Params != nil {
			return fmt.Sprintf("items %v and %v are equal; items must be unique", m.err.Params["index1"], m.err.Params["index2"])
		}
		return "items must be unique"
	},
	"pattern": func(m msg) string {
		p, _ := m.want.(string)
		return "string does not match pattern " + quote(p)
	},
	"anyOf": func(m msg) string {
		return fmt.Sprintf("value does not match any of the %d alternatives", count(m.want))
	},
	"oneOf": func(m msg) string {
		if m.err != nil && m.err.Code == "one_of_multiple_matches" {
			return fmt.Sprintf("value matches alternatives %v; exactly one must match", m.err.Params["matches"])
		}
		return fmt.Sprintf("value does not match any of the %d alternatives (exactly one must match)", count(m.want))
	},
	"not": func(msg) string {
		return `value matches the schema under "not", which it must not`
	},
}

// message renders the message for a failed keyword.
func message(kw string, want, got any, err *jsonschema.EvaluationError) string {
	if f, ok := messages[kw]; ok {
		return f(msg{want: want, got: got, err: err})
	}
	return "value does not satisfy " + kw
}

func bound(op string) func(m msg) string {
	return func(m msg) string {
		return fmt.Sprintf("must be %s %s, got %s", op, m.want, compact(m.got, 60))
	}
}

func typeList(v any) string {
	switch v := v.(type) {
	case string:
		return v
	case []any:
		names := make([]string, len(v))
		for i, n := range v {
			names[i] = fmt.Sprint(n)
		}
		if len(names) == 1 {
			return names[0]
		}
		return strings.Join(names[:len(names)-1], ", ") + " or " + names[len(names)-1]
	}
	return "a valid type"
}

// valueList renders enum values as JSON, clipped.
func valueList(v any) string {
	a, _ := v.([]any)
	var b strings.Builder
	for i, e := range a {
		if i > 0 {
			b.WriteString(", ")
		}
		if b.Len() > 200 {
			fmt.Fprintf(&b, "… (%d values)", len(a))
			break
		}
		b.WriteString(compact(e, 60))
	}
	return b.String()
}

func count(v any) int {
	a, _ := v.([]any)
	return len(a)
}

// quote renders a string as a JSON string, clipped.
func quote(s string) string {
	return clip(string(appendQuoted(nil, s)), 80)
}
