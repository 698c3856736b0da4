// Package schema is Cairn's JSON Schema gate and validator (C39, C40).
//
// Every schema Cairn accepts (a definition's input and output contracts,
// each child's input schema, each capability's input schema) passes one gate
// in Compile before any model work, and every value a model produces against
// a schema is checked by Schema.Validate. It is built on
// github.com/kaptinlin/jsonschema v0.9.8, guarded against its traps
// (library.go holds the guards, traps_test.go a test for each).
//
//	s, err := schema.Compile([]byte(`{"type":"object","properties":{"name":{"type":"string","minLength":1}},"required":["name"]}`))
//	if err != nil {
//		return err // a *GateError: errors.Is(err, schema.ErrGate)
//	}
//	if err := s.Validate([]byte(`{"name":""}`)); err != nil {
//		return err // a *ValidationError: errors.Is(err, schema.ErrInvalid); its text is for the model
//	}
//
// # The caller's duties
//
//  1. Compile every schema when a definition is loaded, before any model
//     work, and refuse the definition if Compile fails. Compile is cheap to
//     repeat (results are cached), so there is no need to keep the *Schema
//     beyond convenience.
//  2. Show the model Raw() (the bytes as given), hash Canonical() or use
//     Hash() for contract identity.
//  3. For tool input schemas, require IsObjectType().
//  4. Offer the model CompletionSchema(output) for its complete call.
//  5. Validate the raw bytes the model produced (never a decoded float64
//     value), and hand the same bytes on: numbers keep every digit.
//  6. On ErrInvalid, give the error text back to the model so it can fix its
//     call: one issue per line, sorted, capped at 20.
//
// # The gate
//
// A schema is an object or a boolean (true, false). The supported vocabulary
// is the table vocabulary in vocabulary.go, one row per keyword:
//
//   - applicators: properties, additionalProperties (boolean or schema),
//     items (a schema), prefixItems, allOf, anyOf, oneOf, not,
//     $ref (local), $defs, definitions;
//   - assertions: type (a name or a list of names), enum, const, required,
//     minimum, maximum, exclusiveMinimum, exclusiveMaximum, multipleOf,
//     minLength, maxLength, minItems, maxItems, minProperties,
//     maxProperties, uniqueItems, pattern;
//   - annotations, accepted and ignored: title, description, default,
//     examples, $comment, format, deprecated, readOnly, writeOnly, $schema.
//
// Everything else fails at the gate: unknown keywords (a typo such as
// minLenght would otherwise check nothing), keywords Cairn does not support
// (if/then/else, patternProperties, propertyNames, dependentSchemas,
// dependentRequired, unevaluatedProperties, unevaluatedItems, contains,
// $id, $anchor, $dynamicRef, ...), wrong keyword values (minLength: -1,
// type: "strin", required that is not an array of unique strings, an empty
// enum, allOf: [], multipleOf: 0, ...), a schema object with both $defs and
// definitions, malformed JSON (including duplicate member names and invalid
// UTF-8), and a schema nested deeper than 200 levels. A *GateError names the
// JSON pointer and the keyword (the keyword is empty for malformed JSON and
// for a root that is not a schema).
//
// $ref must be local: "#" or "#" followed by a JSON pointer (percent-encoded
// as in a URI fragment) that reaches a schema in the same document, such as
// "#/$defs/node" or "#/properties/a/items". Recursive definitions are fine;
// a reference cycle that never descends into a property or an item (a $ref
// to itself, or through allOf, anyOf, oneOf or not only) is refused. No
// schema is ever fetched: remote and relative references fail at the gate,
// and the library's URL loaders are removed.
//
// $schema may name draft 2020-12 ("https://json-schema.org/draft/2020-12/schema",
// the default) or draft-07 ("http://json-schema.org/draft-07/schema#"),
// each with or without the trailing "#"; anything else fails. Under
// draft-07, prefixItems is refused (draft-07 has no such keyword) and so is
// an assertion beside $ref (draft-07 ignores it; wrap both in allOf).
//
// # Patterns are RE2
//
// pattern uses Go's regexp syntax (RE2), not ECMAScript's: lookahead,
// lookbehind and backreferences are refused at the gate; some classes differ
// where no compile step can catch it: \s is [\t\n\f\r ], while ECMAScript's
// also matches \v, U+00A0 and the other Unicode spaces. Patterns are
// unanchored, as in JSON Schema.
//
// # Validation
//
// Instances are read from bytes with numbers kept as written and compared
// exactly (big.Rat): multipleOf 0.01 accepts 0.07 and refuses 0.071, and an
// integer above 2^53 keeps every digit. To bound the work one value can
// cause, a number literal may have at most 1000 characters and an exponent
// of at most ±1000 (in instances and schemas alike), and an instance may
// nest at most 1000 levels deep. Lengths count Unicode
// code points. format is an annotation and never fails validation.
// A *ValidationError lists Issues with the instance pointer, the schema
// pointer of the keyword that failed (behind any $ref), the keyword and a
// message. When no alternative of an anyOf or oneOf matches, the issues of
// the alternatives are listed too, except for alternatives plainly not meant
// for the value (its "type" differs, or a const or enum on a direct
// property, a discriminator such as "kind", failed) while others were.
//
// Compiled schemas are cached (1024 entries and 16 MiB of JSON per level;
// a schema above 4 MiB is not kept): by the SHA-256 of the bytes given, so
// compiling the same schema twice costs a hash and a map lookup, and by the
// SHA-256 of the canonical form, so schemas that differ only in layout
// compile once.
//
// # Bounded work
//
// The library evaluates every subschema a value reaches, without
// memoization, so branching multiplies: an expression grammar whose oneOf
// alternatives share property names doubles its work with each level of
// nesting. The gate refuses a schema that applies more than 1000
// subschemas to one value through allOf, anyOf, oneOf, not and $ref, and
// Validate counts the evaluations an instance needs before the library
// runs, refusing it beyond 200,000 (about half a second of work) with one
// issue at the root.
//
// # The quick check
//
// Most tool arguments are objects of strings and numbers with a few
// required members. For a schema made only of type, properties, required,
// additionalProperties, items and the length and count bounds (and
// annotations), Validate first walks the value with a check of its own
// (quick.go), which allocates nothing: a value it accepts is valid, and
// the library does not run. Anything it does not accept, it leaves to the
// library, so every refusal and its issues are the library's. It accepts
// only what the library accepts (TestQuickNeverAcceptsWhatTheLibraryRefuses,
// FuzzQuickAgreesWithTheLibrary). A run_js call's arguments took 3.7 µs to
// check through the library and take 1.1 µs (BenchmarkValidateToolArgs).
package schema
