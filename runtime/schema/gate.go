package schema

import (
	"fmt"
	"maps"
	"net/url"
	"slices"
	"strings"
)

// gate is the result of checking one schema document: every schema position
// in it, and every $ref with the position it resolves to.
type gate struct {
	doc     any
	dialect dialect
	// schemas maps the pointer of every schema position to its tokens.
	schemas map[string][]string
	// refs lists the $ref sites in walk order.
	refs []refSite
	// refTargets maps the pointer of each schema object holding a $ref to
	// the tokens of the schema it resolves to.
	refTargets map[string][]string
	// inPlace maps a schema position to the positions applied to the same
	// instance (allOf, anyOf, oneOf, not, $ref), for cycle detection.
	inPlace map[string][]string
}

type refSite struct {
	at  []string // the schema object holding the $ref
	ref string
}

// check runs the gate over a decoded schema document.
func check(doc any) (*gate, *GateError) {
	g := &gate{
		doc:        doc,
		schemas:    map[string][]string{},
		refTargets: map[string][]string{},
		inPlace:    map[string][]string{},
	}
	if root, ok := doc.(map[string]any); ok {
		if s, ok := root["$schema"].(string); ok {
			g.dialect = dialects[s] // an unknown value is reported by the walk
		}
	}
	if err := g.walk(nil, doc, ""); err != nil {
		return nil, err
	}
	if err := g.resolveRefs(); err != nil {
		return nil, err
	}
	if err := g.findCycle(); err != nil {
		return nil, err
	}
	return g, nil
}

func gateErr(ptr, keyword, reason string) *GateError {
	return &GateError{Pointer: ptr, Keyword: keyword, Reason: reason}
}

// walk checks the schema v at position at; via is the keyword holding it.
func (g *gate) walk(at []string, v any, via string) *GateError {
	ptr := formatPointer(at)
	g.schemas[ptr] = at
	obj, ok := v.(map[string]any)
	if !ok {
		if _, ok := v.(bool); ok {
			return nil
		}
		return gateErr(ptr, via, "a schema must be an object or a boolean, got "+jsonType(v))
	}
	keys := sortedKeys(obj)

	// Every keyword must be known before anything else is looked at: a typo
	// such as minLenght would otherwise check nothing.
	for _, k := range keys {
		if _, ok := vocabulary[k]; ok {
			continue
		}
		if reason, ok := unsupported[k]; ok {
			return gateErr(ptr, k, reason)
		}
		reason := "unknown keyword"
		if s := suggest(k); s != "" {
			reason += fmt.Sprintf(" (did you mean %q?)", s)
		}
		return gateErr(ptr, k, reason)
	}

	// Rules across keywords.
	if _, ok := obj["$defs"]; ok {
		if _, ok := obj["definitions"]; ok {
			// The library keeps $defs and silently drops definitions, and
			// then every reference into definitions validates anything.
			return gateErr(ptr, "definitions", "both $defs and definitions in one schema object: use one of them")
		}
	}
	if s, ok := obj["$schema"].(string); ok && len(at) > 0 {
		if d, known := dialects[s]; known && d != g.dialect {
			return gateErr(ptr, "$schema", fmt.Sprintf("a nested $schema must name the root's dialect (%s)", g.dialect))
		}
	}
	if _, ok := obj["$ref"]; ok && g.dialect == draft07 {
		for _, k := range keys {
			r := vocabulary[k]
			if k == "$ref" || r.annotation || k == "$defs" || k == "definitions" {
				continue
			}
			return gateErr(ptr, k, "draft-07 ignores keywords beside $ref, so this would check nothing: "+
				`move it and the $ref into "allOf", or use draft 2020-12`)
		}
	}

	for _, k := range keys {
		r := vocabulary[k]
		val := obj[k]
		if r.since2020 && g.dialect == draft07 {
			return gateErr(ptr, k, k+" is not a draft-07 keyword: use draft 2020-12")
		}
		here := appendToken(at, k)
		switch r.shape {
		case valueShape:
			if reason := r.check(val); reason != "" {
				return gateErr(ptr, k, reason)
			}
			if reason := checkNumbers(val); reason != "" {
				return gateErr(ptr, k, reason)
			}
			if k == "$ref" {
				g.refs = append(g.refs, refSite{at: at, ref: val.(string)})
			}
		case schemaShape:
			if err := g.walk(here, val, k); err != nil {
				return err
			}
			if r.inPlace {
				g.inPlace[ptr] = append(g.inPlace[ptr], formatPointer(here))
			}
		case schemaListShape:
			list, ok := val.([]any)
			if !ok || len(list) == 0 {
				return gateErr(ptr, k, "must be a non-empty array of schemas, got "+describe(val))
			}
			for i, sub := range list {
				child := appendToken(here, fmt.Sprint(i))
				if err := g.walk(child, sub, k); err != nil {
					return err
				}
				if r.inPlace {
					g.inPlace[ptr] = append(g.inPlace[ptr], formatPointer(child))
				}
			}
		case schemaMapShape:
			m, ok := val.(map[string]any)
			if !ok {
				return gateErr(ptr, k, "must be an object whose values are schemas, got "+jsonType(val))
			}
			for _, name := range sortedKeys(m) {
				if err := g.walk(appendToken(here, name), m[name], k); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

func describe(v any) string {
	if a, ok := v.([]any); ok && len(a) == 0 {
		return "an empty array"
	}
	return jsonType(v)
}

// resolveRefs resolves every $ref as a JSON pointer into this document. Only
// local references resolve; the pointer must reach a schema position.
func (g *gate) resolveRefs() *GateError {
	for _, site := range g.refs {
		ptr := formatPointer(site.at)
		ref := site.ref
		if !strings.HasPrefix(ref, "#") {
			return gateErr(ptr, "$ref", fmt.Sprintf("%q is not a local reference: use \"#\" or a JSON pointer such as \"#/$defs/name\"; no schema is ever fetched", clip(ref, 100)))
		}
		frag, err := url.PathUnescape(ref[1:])
		if err != nil {
			return gateErr(ptr, "$ref", fmt.Sprintf("%q has bad percent-encoding", clip(ref, 100)))
		}
		if frag != "" && frag[0] != '/' {
			return gateErr(ptr, "$ref", fmt.Sprintf("%q names an anchor; anchors are not supported, use a JSON pointer such as \"#/$defs/name\"", clip(ref, 100)))
		}
		tokens, err := parsePointer(frag)
		if err != nil {
			return gateErr(ptr, "$ref", fmt.Sprintf("%q is not a valid JSON pointer: %v", clip(ref, 100), err))
		}
		target := formatPointer(tokens)
		if _, ok := g.schemas[target]; !ok {
			if _, exists := lookup(g.doc, tokens); exists {
				return gateErr(ptr, "$ref", fmt.Sprintf("%q points to a value that is not a schema", clip(ref, 100)))
			}
			return gateErr(ptr, "$ref", fmt.Sprintf("%q points to nothing in this schema", clip(ref, 100)))
		}
		g.refTargets[ptr] = tokens
		g.inPlace[ptr] = append(g.inPlace[ptr], target)
	}
	return nil
}

// findCycle rejects schemas in which following $ref, allOf, anyOf, oneOf and
// not can come back to the same schema without descending into a property or
// an item: validating anything against them would never end.
func (g *gate) findCycle() *GateError {
	const (
		unseen = iota
		active
		done
	)
	state := map[string]int{}
	var stack []string
	var visit func(p string) []string
	visit = func(p string) []string {
		state[p] = active
		stack = append(stack, p)
		for _, q := range g.inPlace[p] {
			switch state[q] {
			case active:
				i := slices.Index(stack, q)
				return append(slices.Clone(stack[i:]), q)
			case unseen:
				if c := visit(q); c != nil {
					return c
				}
			}
		}
		stack = stack[:len(stack)-1]
		state[p] = done
		return nil
	}
	for _, p := range slices.Sorted(maps.Keys(g.inPlace)) {
		if state[p] != unseen {
			continue
		}
		cycle := visit(p)
		if cycle == nil {
			continue
		}
		at := cycle[0]
		for _, c := range cycle {
			if _, ok := g.refTargets[c]; ok {
				at = c
				break
			}
		}
		shown := make([]string, len(cycle))
		for i, c := range cycle {
			shown[i] = renderPointer(c)
		}
		return gateErr(at, "$ref", "reference cycle that never descends into a property or an item, so validation would never end: "+strings.Join(shown, " -> "))
	}
	return nil
}

// suggest returns the supported keyword closest to an unknown one, if it is
// within two edits.
func suggest(k string) string {
	best, bestDist := "", 3
	for _, known := range slices.Sorted(maps.Keys(vocabulary)) {
		if d := editDistance(strings.ToLower(k), strings.ToLower(known)); d < bestDist {
			best, bestDist = known, d
		}
	}
	return best
}

// editDistance is the Damerau-Levenshtein distance (with adjacent swaps),
// capped for long inputs.
func editDistance(a, b string) int {
	if len(a) > 64 || len(b) > 64 {
		return 99
	}
	d := make([][]int, len(a)+1)
	for i := range d {
		d[i] = make([]int, len(b)+1)
		d[i][0] = i
	}
	for j := range d[0] {
		d[0][j] = j
	}
	for i := 1; i <= len(a); i++ {
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			d[i][j] = min(d[i-1][j]+1, d[i][j-1]+1, d[i-1][j-1]+cost)
			if i > 1 && j > 1 && a[i-1] == b[j-2] && a[i-2] == b[j-1] {
				d[i][j] = min(d[i][j], d[i-2][j-2]+1)
			}
		}
	}
	return d[len(a)][len(b)]
}
