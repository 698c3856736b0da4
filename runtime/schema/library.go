package schema

import (
	"fmt"
	"strings"

	"github.com/kaptinlin/jsonschema"
)

// This file holds everything that guards github.com/kaptinlin/jsonschema
// v0.9.8 (traps_test.go has a test for each trap). The gate has already refused what the
// library would get wrong; these guards keep the library from acting on its
// own (fetching, asserting formats, resolving pointers its own way).

// newCompiler returns a library compiler that cannot fetch anything and does
// not assert formats. A fresh compiler per schema keeps schemas from seeing
// each other (the library caches schemas by $id on the compiler).
func newCompiler() *jsonschema.Compiler {
	c := jsonschema.NewCompiler()
	// NewCompiler registers http and https loaders that fetch a remote $ref
	// while compiling. Remove them, and any other loader a later version
	// adds: no schema is ever fetched.
	delete(c.Loaders, "http")
	delete(c.Loaders, "https")
	for scheme := range c.Loaders {
		delete(c.Loaders, scheme)
	}
	// format is an annotation (C40). The library's default is false today;
	// state it so an upgrade that flips the default changes nothing here.
	c.SetAssertFormat(false)
	c.SetDefaultDialect(jsonschema.Draft202012)
	return c
}

// compileLibrary compiles a document that passed the gate.
func compileLibrary(canonical []byte, g *gate) (*jsonschema.Schema, *GateError) {
	s, err := newCompiler().Compile(canonical)
	if err != nil {
		return nil, gateErr("", "", "the validator library refused the schema: "+err.Error())
	}
	if s.Dialect() != g.dialect.library() {
		return nil, gateErr("", "$schema", fmt.Sprintf("the validator library read the dialect as %s, not %s", s.Dialect(), g.dialect))
	}
	if err := bindRefs(s, g); err != nil {
		return nil, err
	}
	if err := checkResolved(s); err != nil {
		return nil, err
	}
	warmPatterns(s, g)
	return s, nil
}

// bindRefs points every $ref at the schema the gate resolved it to. The
// library resolves "#/a/b" against the subschema holding the $ref first and
// only then against its parents, and "#/" to the subschema itself; the
// standard resolves both against the document root. Setting ResolvedRef
// from the gate's resolution makes the library validate what the schema
// says.
func bindRefs(root *jsonschema.Schema, g *gate) *GateError {
	for _, site := range g.refs {
		ptr := formatPointer(site.at)
		node := navigate(root, site.at)
		target := navigate(root, g.refTargets[ptr])
		if node == nil || target == nil || node.Ref != site.ref {
			return gateErr(ptr, "$ref", "internal error: the validator library's schema tree does not match the document")
		}
		node.ResolvedRef = target
	}
	return nil
}

// checkResolved refuses a compiled schema with any unresolved reference:
// the library compiles those without error and then validates every
// instance as valid.
func checkResolved(s *jsonschema.Schema) *GateError {
	if refs := s.UnresolvedReferenceURIs(); len(refs) > 0 {
		quoted := make([]string, len(refs))
		for i, r := range refs {
			quoted[i] = fmt.Sprintf("%q", clip(r, 100))
		}
		return gateErr("", "$ref", "unresolved references: "+strings.Join(quoted, ", "))
	}
	return nil
}

// warmPatterns makes the library compile every pattern now. It compiles a
// pattern on first use and stores it in the schema, a data race when two
// goroutines validate with one fresh schema. Validating "" against each
// schema that has a pattern evaluates (and stores) the pattern before the
// schema is shared.
func warmPatterns(root *jsonschema.Schema, g *gate) {
	for _, at := range g.schemas {
		if node := navigate(root, at); node != nil && node.Pattern != nil {
			node.Validate("")
		}
	}
}

// navigate follows pointer tokens (a schema position found by the gate)
// through the library's compiled schema.
func navigate(s *jsonschema.Schema, tokens []string) *jsonschema.Schema {
	for i := 0; i < len(tokens) && s != nil; {
		r, ok := vocabulary[tokens[i]]
		if !ok || r.child == nil {
			return nil
		}
		key := ""
		if r.shape == schemaShape {
			i++
		} else {
			if i+1 >= len(tokens) {
				return nil
			}
			key = tokens[i+1]
			i += 2
		}
		s = r.child(s, key)
	}
	return s
}
