package schema_test

import (
	"errors"
	"fmt"

	"github.com/cairn-agents/cairn/runtime/schema"
)

func Example() {
	s, err := schema.Compile([]byte(`{
		"type": "object",
		"properties": {
			"city": {"type": "string", "minLength": 1},
			"price": {"type": "number", "multipleOf": 0.01}
		},
		"required": ["city", "price"],
		"additionalProperties": false
	}`))
	if err != nil {
		panic(err)
	}
	fmt.Println(s.IsObjectType())
	fmt.Println(s.Validate([]byte(`{"city":"Oslo","price":19.99}`)))

	err = s.Validate([]byte(`{"city":"","price":0.071,"note":"x"}`))
	fmt.Println(errors.Is(err, schema.ErrInvalid))
	fmt.Println(err)

	_, err = schema.Compile([]byte(`{"type":"string","minLenght":3}`))
	fmt.Println(errors.Is(err, schema.ErrGate))
	fmt.Println(err)
	// Output:
	// true
	// <nil>
	// true
	// schema: instance is invalid:
	// /city: minLength: string is shorter than 1 characters (has 0) (schema /properties/city/minLength)
	// /note: additionalProperties: property "note" is not allowed (schema /additionalProperties)
	// /price: multipleOf: must be a multiple of 0.01, got 0.071 (schema /properties/price/multipleOf)
	// true
	// schema: (root): minLenght: unknown keyword (did you mean "minLength"?)
}

func ExampleCompletionSchema() {
	out, err := schema.Compile([]byte(`{"type":"object","properties":{"answer":{"type":"string"}},"required":["answer"]}`))
	if err != nil {
		panic(err)
	}
	cs, err := schema.CompletionSchema(out)
	if err != nil {
		panic(err)
	}
	fmt.Println(cs.Validate([]byte(`{"type":"output","output":{"answer":"42"}}`)))
	fmt.Println(cs.Validate([]byte(`{"type":"needs_input","question":"Which unit?"}`)))
	fmt.Println(cs.Validate([]byte(`{"type":"output","output":{}}`)))
	// Output:
	// <nil>
	// <nil>
	// schema: instance is invalid:
	// (root): oneOf: value does not match any of the 2 alternatives (exactly one must match) (schema /oneOf)
	// /output: required: missing required property "answer" (schema /oneOf/0/properties/output/required)
}
