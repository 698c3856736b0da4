package schema

import (
	"fmt"
	"maps"
	"slices"
)

// The library evaluates every subschema a value reaches, without
// memoization: all alternatives of anyOf and oneOf, every branch of allOf,
// and each $ref again each time. Its work is the number of (subschema,
// value) evaluations, which grows with the product of the branching along
// a path. A reasonable expression grammar
//
//	{"$defs":{"e":{"oneOf":[
//	  {"properties":{"op":{"const":"add"},"left":{"$ref":"#/$defs/e"},"right":{"$ref":"#/$defs/e"}}},
//	  {"properties":{"op":{"const":"mul"},"left":{"$ref":"#/$defs/e"},"right":{"$ref":"#/$defs/e"}}},
//	  {"type":"integer"}]}}, "$ref":"#/$defs/e"}
//
// takes the library 7 s for a 16-deep expression, and doubles with each
// level. So the gate bounds the branching at one value (maxExpansion), and
// Validate counts the evaluations an instance needs, before the library
// runs, refusing the instance beyond maxEvaluations.
const (
	// maxExpansion bounds the subschemas applied to one value by allOf,
	// anyOf, oneOf, not and $ref alone.
	maxExpansion = 1000
	// maxEvaluations bounds the (subschema, value) evaluations of one
	// Validate: about half a second of the library's time (~2 us each).
	// The benchmark's 1.3 KB order needs 90; a 20,000-element array of
	// small objects about 60,000.
	maxEvaluations = 200_000
)

// plan is a compact form of a gated schema: what the library evaluates.
type plan struct {
	nodes []planNode
}

type planNode struct {
	inPlace    []int32          // allOf, anyOf, oneOf, not and $ref subschemas
	properties map[string]int32 // properties
	// missing lists required properties whose schema has no default: the
	// library evaluates their schema against null when they are missing.
	missing    []namedNode
	additional int32 // additionalProperties, or -1
	prefix     []int32
	items      int32 // items, or -1
}

type namedNode struct {
	name string
	node int32
}

// newPlan builds the plan of a document that passed the gate. Node 0 is the
// root.
func newPlan(g *gate) *plan {
	ptrs := slices.Sorted(maps.Keys(g.schemas)) // "" (the root) first
	index := make(map[string]int32, len(ptrs))
	for i, p := range ptrs {
		index[p] = int32(i)
	}
	p := &plan{nodes: make([]planNode, len(ptrs))}
	for i, ptr := range ptrs {
		n := &p.nodes[i]
		n.additional, n.items = -1, -1
		v, _ := lookup(g.doc, g.schemas[ptr])
		obj, ok := v.(map[string]any)
		if !ok {
			continue // a boolean schema evaluates nothing else
		}
		child := func(tokens ...string) int32 {
			return index[ptr+formatPointer(tokens)]
		}
		if target, ok := g.refTargets[ptr]; ok {
			n.inPlace = append(n.inPlace, index[formatPointer(target)])
		}
		for _, kw := range []string{"allOf", "anyOf", "oneOf"} {
			if list, ok := obj[kw].([]any); ok {
				for j := range list {
					n.inPlace = append(n.inPlace, child(kw, fmt.Sprint(j)))
				}
			}
		}
		if _, ok := obj["not"]; ok {
			n.inPlace = append(n.inPlace, child("not"))
		}
		if props, ok := obj["properties"].(map[string]any); ok {
			n.properties = make(map[string]int32, len(props))
			for _, name := range sortedKeys(props) {
				n.properties[name] = child("properties", name)
			}
			required, _ := obj["required"].([]any)
			for _, r := range required {
				name := r.(string)
				sub, ok := props[name]
				if !ok {
					continue
				}
				if m, isObj := sub.(map[string]any); isObj {
					if _, hasDefault := m["default"]; hasDefault && m["default"] != nil {
						continue
					}
				}
				n.missing = append(n.missing, namedNode{name, child("properties", name)})
			}
		}
		if _, ok := obj["additionalProperties"]; ok {
			n.additional = child("additionalProperties")
		}
		if list, ok := obj["prefixItems"].([]any); ok {
			for j := range list {
				n.prefix = append(n.prefix, child("prefixItems", fmt.Sprint(j)))
			}
		}
		if _, ok := obj["items"]; ok {
			n.items = child("items")
		}
	}
	return p
}

// checkExpansion refuses schemas that apply more than maxExpansion
// subschemas to one value through allOf, anyOf, oneOf, not and $ref (the
// gate already refused cycles among those).
func (p *plan) checkExpansion(g *gate) *GateError {
	ptrs := slices.Sorted(maps.Keys(g.schemas))
	memo := make([]int, len(p.nodes))
	var expand func(n int32) int
	expand = func(n int32) int {
		if memo[n] > 0 {
			return memo[n]
		}
		total := 1
		for _, c := range p.nodes[n].inPlace {
			total = min(total+expand(c), maxExpansion+1)
		}
		memo[n] = total
		return total
	}
	for i, ptr := range ptrs {
		if expand(int32(i)) > maxExpansion {
			kw := "$ref"
			if obj, ok := lookup(g.doc, g.schemas[ptr]); ok {
				for _, k := range []string{"$ref", "allOf", "anyOf", "oneOf", "not"} {
					if _, has := obj.(map[string]any)[k]; has {
						kw = k
						break
					}
				}
			}
			return gateErr(ptr, kw, fmt.Sprintf("one value would be checked against more than %d subschemas through allOf, anyOf, oneOf, not and $ref: refer to shared definitions fewer times", maxExpansion))
		}
	}
	return nil
}

// evaluations counts the library's evaluations of the instance v, up to
// limit; it reports whether the count stays within limit.
func (p *plan) evaluations(v any, limit int) bool {
	budget := limit
	return p.count(0, v, &budget)
}

func (p *plan) count(n int32, v any, budget *int) bool {
	*budget--
	if *budget < 0 {
		return false
	}
	node := &p.nodes[n]
	for _, c := range node.inPlace {
		if !p.count(c, v, budget) {
			return false
		}
	}
	switch v := v.(type) {
	case map[string]any:
		for name, c := range node.properties {
			if child, ok := v[name]; ok && !p.count(c, child, budget) {
				return false
			}
		}
		for _, m := range node.missing {
			if _, ok := v[m.name]; !ok && !p.count(m.node, nil, budget) {
				return false
			}
		}
		if node.additional >= 0 {
			for name, child := range v {
				if _, declared := node.properties[name]; !declared && !p.count(node.additional, child, budget) {
					return false
				}
			}
		}
	case []any:
		for i, e := range v {
			c := node.items
			if i < len(node.prefix) {
				c = node.prefix[i]
			}
			if c >= 0 && !p.count(c, e, budget) {
				return false
			}
		}
	}
	return true
}
