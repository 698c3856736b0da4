package schema

import (
	"encoding/json"
	"fmt"
	"math/big"
	"regexp"
	"strconv"

	"github.com/kaptinlin/jsonschema"
)

// shape says what a keyword's value holds.
type shape int

const (
	valueShape      shape = iota // data, checked by rule.check
	schemaShape                  // one subschema
	schemaListShape              // a non-empty array of subschemas
	schemaMapShape               // an object whose member values are subschemas
)

// rule is how the gate treats one keyword.
type rule struct {
	shape shape
	// check validates a valueShape keyword's value: "" if fine, else why not.
	check func(v any) string
	// inPlace marks applicators whose subschemas apply to the same instance
	// (allOf, anyOf, oneOf, not): a $ref cycle through only these never ends.
	inPlace bool
	// annotation marks keywords that never affect validation.
	annotation bool
	// since2020 marks keywords that draft-07 does not have.
	since2020 bool
	// child finds a subschema in the library's compiled schema: key is the
	// member name (schemaMapShape), the index (schemaListShape) or "".
	child func(s *jsonschema.Schema, key string) *jsonschema.Schema
}

// vocabulary is every keyword the gate accepts: one row per keyword.
// Anything else fails at the gate. Adding a keyword is one row here plus its
// tests (and, for an assertion, a message in messages.go if the generic one
// is not clear enough). The library must implement the keyword with the
// standard's meaning; check its source before adding a row.
var vocabulary = map[string]rule{
	// Applicators.
	"properties":           {shape: schemaMapShape, child: libProperty},
	"additionalProperties": {shape: schemaShape, child: libAdditionalProperties},
	"items":                {shape: schemaShape, child: libItems},
	"prefixItems":          {shape: schemaListShape, since2020: true, child: libPrefixItem},
	"allOf":                {shape: schemaListShape, inPlace: true, child: libAllOf},
	"anyOf":                {shape: schemaListShape, inPlace: true, child: libAnyOf},
	"oneOf":                {shape: schemaListShape, inPlace: true, child: libOneOf},
	"not":                  {shape: schemaShape, inPlace: true, child: libNot},
	"$defs":                {shape: schemaMapShape, child: libDef},
	"definitions":          {shape: schemaMapShape, child: libDef},
	"$ref":                 {check: isLocalRefSyntax}, // resolved by the gate after the walk

	// Assertions.
	"type":             {check: isTypeValue},
	"enum":             {check: isNonEmptyArray},
	"const":            {check: isAnything},
	"required":         {check: isUniqueStrings},
	"minimum":          {check: isNumber},
	"maximum":          {check: isNumber},
	"exclusiveMinimum": {check: isNumber},
	"exclusiveMaximum": {check: isNumber},
	"multipleOf":       {check: isPositiveNumber},
	"minLength":        {check: isCount},
	"maxLength":        {check: isCount},
	"minItems":         {check: isCount},
	"maxItems":         {check: isCount},
	"minProperties":    {check: isCount},
	"maxProperties":    {check: isCount},
	"uniqueItems":      {check: isBool},
	"pattern":          {check: isRE2},

	// Annotations, accepted and ignored.
	"$schema":     {check: isDialect, annotation: true},
	"$comment":    {check: isString, annotation: true},
	"title":       {check: isString, annotation: true},
	"description": {check: isString, annotation: true},
	"default":     {check: isAnything, annotation: true},
	"examples":    {check: isArray, annotation: true},
	"format":      {check: isString, annotation: true},
	"deprecated":  {check: isBool, annotation: true},
	"readOnly":    {check: isBool, annotation: true},
	"writeOnly":   {check: isBool, annotation: true},
}

// unsupported names standard keywords that the gate refuses on purpose, with
// the reason given to the schema's author. Any other unknown keyword is
// refused as unknown (often a typo, which would otherwise check nothing).
var unsupported = map[string]string{
	"$id":                   "$id is not supported: schemas are anonymous and refer inside themselves with local JSON pointers",
	"id":                    "id (draft-04 $id) is not supported",
	"$anchor":               "$anchor is not supported: use a local JSON pointer ($ref: \"#/$defs/name\")",
	"$dynamicRef":           "$dynamicRef is not supported",
	"$dynamicAnchor":        "$dynamicAnchor is not supported",
	"$recursiveRef":         "$recursiveRef is not supported",
	"$recursiveAnchor":      "$recursiveAnchor is not supported",
	"$vocabulary":           "$vocabulary is not supported",
	"if":                    "if/then/else is not supported",
	"then":                  "if/then/else is not supported",
	"else":                  "if/then/else is not supported",
	"dependentSchemas":      "dependentSchemas is not supported",
	"dependentRequired":     "dependentRequired is not supported",
	"dependencies":          "dependencies is not supported",
	"patternProperties":     "patternProperties is not supported",
	"propertyNames":         "propertyNames is not supported",
	"unevaluatedProperties": "unevaluatedProperties is not supported: use additionalProperties",
	"unevaluatedItems":      "unevaluatedItems is not supported: use items",
	"contains":              "contains is not supported",
	"minContains":           "minContains is not supported",
	"maxContains":           "maxContains is not supported",
	"additionalItems":       "additionalItems is not supported: use prefixItems and items",
	"contentEncoding":       "contentEncoding is not supported",
	"contentMediaType":      "contentMediaType is not supported",
	"contentSchema":         "contentSchema is not supported",
}

// dialect is a JSON Schema draft the gate accepts in $schema.
type dialect int

const (
	draft2020 dialect = iota // the default when $schema is absent
	draft07
)

func (d dialect) String() string {
	if d == draft07 {
		return "draft-07"
	}
	return "draft 2020-12"
}

func (d dialect) library() jsonschema.Dialect {
	if d == draft07 {
		return jsonschema.Draft7
	}
	return jsonschema.Draft202012
}

// dialects are the accepted $schema values, exactly as written.
var dialects = map[string]dialect{
	"https://json-schema.org/draft/2020-12/schema":  draft2020,
	"https://json-schema.org/draft/2020-12/schema#": draft2020,
	"http://json-schema.org/draft-07/schema":        draft07,
	"http://json-schema.org/draft-07/schema#":       draft07,
}

// Value checks.

var jsonTypes = map[string]bool{
	"array": true, "boolean": true, "integer": true, "null": true,
	"number": true, "object": true, "string": true,
}

func isTypeValue(v any) string {
	switch v := v.(type) {
	case string:
		if !jsonTypes[v] {
			return fmt.Sprintf("%q is not a JSON type (array, boolean, integer, null, number, object, string)", v)
		}
		return ""
	case []any:
		if len(v) == 0 {
			return "must be a type name or a non-empty array of type names"
		}
		seen := map[string]bool{}
		for i, e := range v {
			s, ok := e.(string)
			if !ok {
				return fmt.Sprintf("element %d must be a type name, got %s", i, jsonType(e))
			}
			if !jsonTypes[s] {
				return fmt.Sprintf("element %d: %q is not a JSON type (array, boolean, integer, null, number, object, string)", i, s)
			}
			if seen[s] {
				return fmt.Sprintf("element %d: %q appears twice", i, s)
			}
			seen[s] = true
		}
		return ""
	}
	return "must be a type name or an array of type names, got " + jsonType(v)
}

func isNonEmptyArray(v any) string {
	a, ok := v.([]any)
	if !ok {
		return "must be an array, got " + jsonType(v)
	}
	if len(a) == 0 {
		return "must not be empty (an empty enum allows nothing)"
	}
	return ""
}

func isAnything(any) string { return "" }

func isUniqueStrings(v any) string {
	a, ok := v.([]any)
	if !ok {
		return "must be an array of property names, got " + jsonType(v)
	}
	seen := map[string]bool{}
	for i, e := range a {
		s, ok := e.(string)
		if !ok {
			return fmt.Sprintf("element %d must be a string, got %s", i, jsonType(e))
		}
		if seen[s] {
			return fmt.Sprintf("element %d: %q appears twice", i, s)
		}
		seen[s] = true
	}
	return ""
}

func isNumber(v any) string {
	if _, ok := v.(json.Number); !ok {
		return "must be a number, got " + jsonType(v)
	}
	return ""
}

func isPositiveNumber(v any) string {
	n, ok := v.(json.Number)
	if !ok {
		return "must be a number, got " + jsonType(v)
	}
	if r, ok := parseRat(n); !ok || r.Sign() <= 0 {
		return "must be greater than 0, got " + string(n)
	}
	return ""
}

// maxCount is the largest count accepted (2^53-1): the library holds counts
// in float64, exact up to here.
var maxCount = big.NewRat(1<<53-1, 1)

func isCount(v any) string {
	n, ok := v.(json.Number)
	if !ok {
		return "must be a non-negative integer, got " + jsonType(v)
	}
	r, ok := parseRat(n)
	switch {
	case !ok || !r.IsInt() || r.Sign() < 0:
		return "must be a non-negative integer, got " + string(n)
	case r.Cmp(maxCount) > 0:
		return "must be at most 9007199254740991, got " + string(n)
	}
	return ""
}

func isBool(v any) string {
	if _, ok := v.(bool); !ok {
		return "must be true or false, got " + jsonType(v)
	}
	return ""
}

func isString(v any) string {
	if _, ok := v.(string); !ok {
		return "must be a string, got " + jsonType(v)
	}
	return ""
}

func isArray(v any) string {
	if _, ok := v.([]any); !ok {
		return "must be an array, got " + jsonType(v)
	}
	return ""
}

func isRE2(v any) string {
	s, ok := v.(string)
	if !ok {
		return "must be a string, got " + jsonType(v)
	}
	if _, err := regexp.Compile(s); err != nil {
		return fmt.Sprintf("%q is not a valid RE2 regular expression (Go regexp syntax: no lookaround, no backreferences): %v", s, err)
	}
	return ""
}

func isDialect(v any) string {
	s, ok := v.(string)
	if !ok {
		return "must be a string, got " + jsonType(v)
	}
	if _, ok := dialects[s]; !ok {
		return fmt.Sprintf("%q is not a supported dialect: use %q (the default) or %q",
			s, "https://json-schema.org/draft/2020-12/schema", "http://json-schema.org/draft-07/schema#")
	}
	return ""
}

func isLocalRefSyntax(v any) string {
	if _, ok := v.(string); !ok {
		return "must be a string, got " + jsonType(v)
	}
	return ""
}

func parseRat(n json.Number) (*big.Rat, bool) {
	return new(big.Rat).SetString(string(n))
}

// Navigation in the library's compiled schema, used to bind references.

func libProperty(s *jsonschema.Schema, key string) *jsonschema.Schema {
	if s.Properties == nil {
		return nil
	}
	return (*s.Properties)[key]
}

func libDef(s *jsonschema.Schema, key string) *jsonschema.Schema { return s.Defs[key] }

func libAdditionalProperties(s *jsonschema.Schema, _ string) *jsonschema.Schema {
	return s.AdditionalProperties
}

func libItems(s *jsonschema.Schema, _ string) *jsonschema.Schema { return s.Items }
func libNot(s *jsonschema.Schema, _ string) *jsonschema.Schema   { return s.Not }

func libPrefixItem(s *jsonschema.Schema, key string) *jsonschema.Schema {
	return index(s.PrefixItems, key)
}
func libAllOf(s *jsonschema.Schema, key string) *jsonschema.Schema { return index(s.AllOf, key) }
func libAnyOf(s *jsonschema.Schema, key string) *jsonschema.Schema { return index(s.AnyOf, key) }
func libOneOf(s *jsonschema.Schema, key string) *jsonschema.Schema { return index(s.OneOf, key) }

func index(list []*jsonschema.Schema, key string) *jsonschema.Schema {
	i, err := strconv.Atoi(key)
	if err != nil || i < 0 || i >= len(list) {
		return nil
	}
	return list[i]
}
