package schema

import (
	"encoding/json"
	"strings"
	"unicode/utf8"
)

// quick is a fast check for the schemas most tool arguments have: types,
// properties, required, additionalProperties, items and length bounds,
// nothing else. The library costs ~2 µs per subschema it evaluates (a
// result tree, a dynamic scope, maps), which made it the largest part of a
// run_js call's own time after the script. quick walks the decoded
// instance once and allocates nothing.
//
// It only ever says yes: valid returns true when the library would accept
// the value too, and false when it does not know or the value is invalid.
// Then the library runs, so a refusal and its issues are the library's,
// exactly as without quick. For the keywords quick knows, "valid" means
// the same to both: each row below was checked against the library's
// source (v0.9.8), and FuzzQuickAgreesWithTheLibrary holds it.
type quick struct {
	never      bool     // the false schema
	types      typeMask // 0: any type
	properties map[string]*quick
	required   []string
	// additional applies to the members not in properties: nil accepts
	// them all.
	additional *quick
	items      *quick // nil: any items
	// Bounds, or -1: minLength and maxLength count code points, as the
	// library does (utf8.RuneCountInString).
	minLength, maxLength         int64
	minItems, maxItems           int64
	minProperties, maxProperties int64
}

type typeMask uint8

const (
	typeNull typeMask = 1 << iota
	typeBoolean
	typeObject
	typeArray
	typeNumber
	typeInteger
	typeString
)

var typeBits = map[string]typeMask{
	"null": typeNull, "boolean": typeBoolean, "object": typeObject, "array": typeArray,
	"number": typeNumber, "integer": typeInteger, "string": typeString,
}

// quickAnnotations are the keywords quick ignores because the library does
// too (format is an annotation: the compiler is set so).
var quickAnnotations = map[string]bool{
	"$schema": true, "$comment": true, "title": true, "description": true, "default": true,
	"examples": true, "format": true, "deprecated": true, "readOnly": true, "writeOnly": true,
}

// newQuick returns the quick check of a gated schema document, or nil when
// it uses a keyword quick does not know (then the library checks every
// value).
func newQuick(doc any) *quick {
	q := &quick{minLength: -1, maxLength: -1, minItems: -1, maxItems: -1, minProperties: -1, maxProperties: -1}
	switch v := doc.(type) {
	case bool:
		q.never = !v
		return q
	case map[string]any:
		for kw, val := range v {
			if quickAnnotations[kw] {
				continue
			}
			if !q.set(kw, val) {
				return nil
			}
		}
		return q
	}
	return nil
}

// set applies one keyword of a schema object; false when quick does not
// know it.
func (q *quick) set(kw string, val any) bool {
	switch kw {
	case "type":
		names, ok := val.([]any)
		if !ok {
			names = []any{val}
		}
		for _, n := range names {
			s, _ := n.(string)
			bit, ok := typeBits[s]
			if !ok {
				return false
			}
			q.types |= bit
		}
		return true
	case "properties":
		m, ok := val.(map[string]any)
		if !ok {
			return false
		}
		q.properties = make(map[string]*quick, len(m))
		for name, sub := range m {
			if q.properties[name] = newQuick(sub); q.properties[name] == nil {
				return false
			}
		}
		return true
	case "required":
		list, ok := val.([]any)
		if !ok {
			return false
		}
		for _, e := range list {
			s, ok := e.(string)
			if !ok {
				return false
			}
			q.required = append(q.required, s)
		}
		return true
	case "additionalProperties":
		q.additional = newQuick(val)
		return q.additional != nil
	case "items":
		q.items = newQuick(val)
		return q.items != nil
	}
	var bound *int64
	switch kw {
	case "minLength":
		bound = &q.minLength
	case "maxLength":
		bound = &q.maxLength
	case "minItems":
		bound = &q.minItems
	case "maxItems":
		bound = &q.maxItems
	case "minProperties":
		bound = &q.minProperties
	case "maxProperties":
		bound = &q.maxProperties
	default:
		return false
	}
	n, ok := val.(json.Number)
	if !ok {
		return false
	}
	r, ok := parseRat(n)
	if !ok || !r.IsInt() || r.Sign() < 0 || r.Cmp(maxCount) > 0 {
		return false
	}
	*bound = r.Num().Int64()
	return true
}

// valid reports whether the library surely accepts v (decoded by
// decodeJSON: objects map[string]any, arrays []any, numbers json.Number).
func (q *quick) valid(v any) bool {
	if q.never {
		return false
	}
	switch v := v.(type) {
	case nil:
		return q.is(typeNull)
	case bool:
		return q.is(typeBoolean)
	case json.Number:
		if q.is(typeNumber) {
			return true
		}
		// An integer to the library is any number with no fraction
		// ("1.0", "1e3"); quick knows it only of plain digits.
		return q.types&typeInteger != 0 && !strings.ContainsAny(string(v), ".eE")
	case string:
		if !q.is(typeString) {
			return false
		}
		if q.minLength < 0 && q.maxLength < 0 {
			return true
		}
		n := int64(utf8.RuneCountInString(v))
		return n >= q.minLength && (q.maxLength < 0 || n <= q.maxLength)
	case []any:
		if !q.is(typeArray) || !within(len(v), q.minItems, q.maxItems) {
			return false
		}
		if q.items != nil {
			for _, e := range v {
				if !q.items.valid(e) {
					return false
				}
			}
		}
		return true
	case map[string]any:
		if !q.is(typeObject) || !within(len(v), q.minProperties, q.maxProperties) {
			return false
		}
		for _, name := range q.required {
			if _, ok := v[name]; !ok {
				return false
			}
		}
		for name, e := range v {
			sub, ok := q.properties[name]
			if !ok {
				sub = q.additional
			}
			if sub != nil && !sub.valid(e) {
				return false
			}
		}
		return true
	}
	return false
}

// is reports whether the schema's type admits t (no type admits all).
func (q *quick) is(t typeMask) bool { return q.types == 0 || q.types&t != 0 }

func within(n int, lo, hi int64) bool {
	return int64(n) >= lo && (hi < 0 || int64(n) <= hi)
}
