package schema

import (
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/kaptinlin/jsonschema"
)

// Validate checks an instance, given as JSON bytes, against the schema. It
// returns nil or a *ValidationError (errors.Is(err, ErrInvalid)). Numbers
// are compared exactly as written (no float64 rounding); Validate changes
// nothing, so the caller hands on the same bytes. Malformed JSON is one
// issue with InstancePointer "". A number literal longer than 1000
// characters or with an exponent beyond ±1000, and nesting deeper than 1000
// levels, are one issue at their place. An instance that would take the
// library more than 200,000 subschema evaluations (about half a second) is
// refused with one issue at the root, before the library runs.
func (s *Schema) Validate(instance []byte) error {
	_, err := s.ValidateValue(instance)
	return err
}

// ValidateValue is Validate that also returns the instance as it decoded
// it when it is valid, so that a caller reading a few fields of it need
// not decode it again: objects are map[string]any, arrays []any, strings
// string (valid UTF-8, as the JSON was), booleans bool, null nil; numbers
// json.Number, as written.
func (s *Schema) ValidateValue(instance []byte) (_ any, err error) {
	defer func() {
		// A last resort: a panic in the library (or here) fails closed.
		if p := recover(); p != nil {
			err = &ValidationError{Issues: []Issue{{Message: internalIssue}}}
		}
	}()
	v, jerr := decodeJSON(instance, maxInstanceDepth, true)
	if jerr != nil {
		ptr := jerr.Pointer
		if jerr.Malformed {
			ptr = ""
		}
		return nil, &ValidationError{Issues: []Issue{{InstancePointer: ptr, Message: jerr.Reason}}}
	}
	if !s.c.plan.evaluations(v, maxEvaluations) {
		return nil, &ValidationError{Issues: []Issue{{Message: tooCostly}}}
	}
	if s.c.quick != nil && s.c.quick.valid(v) {
		return v, nil
	}
	// v is never []byte, so the library evaluates it as a decoded JSON value.
	res := s.c.lib.Validate(v)
	if res.IsValid() {
		return v, nil
	}
	w := &collector{c: s.c, inst: v}
	w.result(res, nil, nil, "")
	if len(w.issues) == 0 { // a result shape this package does not know
		w.issues = append(w.issues, Issue{Message: "value does not satisfy the schema"})
	}
	return nil, &ValidationError{Issues: sortIssues(w.issues)}
}

// tooCostly is the message of the issue reported when checking an
// instance would take more than maxEvaluations evaluations.
var tooCostly = fmt.Sprintf("the value is too large or too deeply nested to check against this schema "+
	"(more than %d subschema evaluations): send a smaller value", maxEvaluations)

// internalIssue is the message of the issue reported when the library
// panics while validating.
const internalIssue = "internal error: the validator failed on this value"

// collector turns the library's result tree into issues with absolute
// pointers. Each result node carries its path relative to its parent
// ("/properties/name", "/items/3", "" for a $ref, ...); the collector
// rebuilds absolute instance and schema pointers while descending, and
// follows a $ref to the target the gate resolved.
type collector struct {
	c      *compiled
	inst   any
	issues []Issue
}

// summaries are keywords whose error only says that a subschema failed; the
// details below them say what failed.
var summaries = map[string]bool{
	"properties": true, "additionalProperties": true, "items": true,
	"prefixItems": true, "allOf": true, "$ref": true,
}

// result collects the issues of one result node: the schema at sch applied
// to the instance value at inst; via is the keyword that led here.
func (w *collector) result(r *jsonschema.EvaluationResult, inst, sch []string, via string) {
	for _, kw := range slices.Sorted(maps.Keys(r.Errors)) {
		e := r.Errors[kw]
		switch {
		case summaries[kw]:
		case kw == "schema": // a false schema
			w.falseSchema(inst, sch, via)
		default:
			w.assertion(kw, e, inst, sch)
		}
	}
	for _, d := range r.Details {
		if d.Valid {
			continue
		}
		path := d.EvaluationPath
		switch {
		case path == "":
			if target, ok := w.c.refTargets[formatPointer(sch)]; ok {
				w.result(d, inst, target, "")
			}
		case strings.HasPrefix(path, "/properties/"):
			name := path[len("/properties/"):]
			// The library also evaluates a missing required property's
			// schema against null; "required" already reports it.
			if obj, ok := w.value(inst).(map[string]any); ok {
				if _, present := obj[name]; present {
					w.result(d, appendToken(inst, name), appendToken(sch, "properties", name), "properties")
				}
			}
		case strings.HasPrefix(path, "/additionalProperties/"):
			name := path[len("/additionalProperties/"):]
			w.result(d, appendToken(inst, name), appendToken(sch, "additionalProperties"), "additionalProperties")
		case strings.HasPrefix(path, "/items/"):
			w.result(d, appendToken(inst, path[len("/items/"):]), appendToken(sch, "items"), "items")
		case strings.HasPrefix(path, "/prefixItems/"):
			i := path[len("/prefixItems/"):]
			w.result(d, appendToken(inst, i), appendToken(sch, "prefixItems", i), "prefixItems")
		case strings.HasPrefix(path, "/allOf/"):
			w.result(d, inst, appendToken(sch, "allOf", path[len("/allOf/"):]), "")
		}
		// "/not/": a failing subschema is what not wants. "/anyOf/i" and
		// "/oneOf/i": below, only when no alternative matched.
	}
	for _, kw := range []string{"anyOf", "oneOf"} {
		if e, ok := r.Errors[kw]; ok && e.Code != "one_of_multiple_matches" {
			w.alternatives(r, kw, inst, sch)
		}
	}
}

// alternatives collects the issues of every alternative of a failed anyOf or
// oneOf. When some alternatives were plainly not meant for the value (see
// mismatched) and others were, only the others are reported.
func (w *collector) alternatives(r *jsonschema.EvaluationResult, kw string, inst, sch []string) {
	prefix := "/" + kw + "/"
	var kept, rest [][]Issue
	for _, d := range r.Details {
		if d.Valid || !strings.HasPrefix(d.EvaluationPath, prefix) {
			continue
		}
		branch := appendToken(sch, kw, d.EvaluationPath[len(prefix):])
		start := len(w.issues)
		w.result(d, inst, branch, "")
		issues := slices.Clone(w.issues[start:])
		w.issues = w.issues[:start]
		if mismatched(issues, inst) {
			rest = append(rest, issues)
		} else {
			kept = append(kept, issues)
		}
	}
	if len(kept) == 0 {
		kept = rest
	}
	for _, issues := range kept {
		w.issues = append(w.issues, issues...)
	}
}

// mismatched reports whether an alternative was plainly not meant for the
// value: its "type" refuses the value itself, or a const or enum refuses a
// direct property of the value (a discriminator such as "kind"), wherever
// the alternative defines it (inline or behind a $ref).
func mismatched(issues []Issue, inst []string) bool {
	here := formatPointer(inst)
	for _, is := range issues {
		switch is.Keyword {
		case "type":
			if is.InstancePointer == here {
				return true
			}
		case "const", "enum":
			tokens, err := parsePointer(is.InstancePointer)
			if err != nil || len(tokens) != len(inst)+1 {
				continue
			}
			if strings.HasSuffix(is.SchemaPointer, "/properties/"+escapeToken(tokens[len(tokens)-1])+"/"+is.Keyword) {
				return true
			}
		}
	}
	return false
}

func (w *collector) value(inst []string) any {
	v, _ := lookup(w.inst, inst)
	return v
}

func (w *collector) assertion(kw string, e *jsonschema.EvaluationError, inst, sch []string) {
	obj, _ := lookup(w.c.doc, sch)
	m, _ := obj.(map[string]any)
	w.issues = append(w.issues, Issue{
		InstancePointer: formatPointer(inst),
		SchemaPointer:   formatPointer(appendToken(sch, kw)),
		Keyword:         kw,
		Message:         message(kw, m[kw], w.value(inst), e),
	})
}

func (w *collector) falseSchema(inst, sch []string, via string) {
	is := Issue{
		InstancePointer: formatPointer(inst),
		SchemaPointer:   formatPointer(sch),
		Keyword:         "false",
		Message:         "no value is allowed here (the schema is false)",
	}
	last := ""
	if len(inst) > 0 {
		last = inst[len(inst)-1]
	}
	switch via {
	case "additionalProperties":
		is.Keyword = "additionalProperties"
		is.Message = "property " + quote(last) + " is not allowed"
	case "properties":
		is.Message = "property " + quote(last) + " is not allowed"
	case "items", "prefixItems":
		is.Message = "item " + last + " is not allowed"
	}
	w.issues = append(w.issues, is)
}
