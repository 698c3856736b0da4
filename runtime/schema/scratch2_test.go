package schema

import ("testing";"fmt";"github.com/kaptinlin/jsonschema")

func TestScratch2(t *testing.T) {
	for _, c := range []struct{ s, i string }{
		{`{"enum":[]}`, `1`},
		{`{"$ref":"#/$defs/missing"}`, `1`},
		{`{"$defs":{"a":{"type":"string"}},"definitions":{"b":{"type":"string"}},"properties":{"x":{"$ref":"#/definitions/b"}}}`, `{"x":1}`},
		{`{"definitions":{"a":{"type":"string"}},"properties":{"x":{"$ref":"#/$defs/a"}}}`, `{"x":1}`},
		{`{"properties":{"x":{"type":"integer"},"a":{"properties":{"x":{"type":"string"}},"$ref":"#/properties/x"}}}`, `{"a":"str"}`},
		{`{"properties":{"x":{"type":"integer"},"a":{"properties":{"x":{"type":"string"}},"$ref":"#/properties/x"}}}`, `{"a":5}`},
		{`{"properties":{"":{"type":"integer"},"a":{"type":"string","$ref":"#/"}}}`, `{"a":"s"}`},
		{`{"$ref":"","type":"string"}`, `1`},
		{`{"$schema":"http://json-schema.org/draft-07/schema#","definitions":{"a":{"type":"string"}},"properties":{"x":{"$ref":"#/definitions/a","minLength":5}}}`, `{"x":"ab"}`},
		{`{"minLenght":3}`, `""`},
		{`{"minLength":-1}`, `""`},
		{`{"type":"strin"}`, `""`},
	} {
		s, err := newCompiler().Compile([]byte(c.s))
		if err != nil { fmt.Println("COMPILE", c.s, err); continue }
		fmt.Println(c.s, c.i, "valid:", s.Validate([]byte(c.i)).IsValid(), s.UnresolvedReferenceURIs())
	}
	c := jsonschema.NewCompiler()
	a, _ := c.Compile([]byte(`{"$id":"http://x/a","type":"string"}`))
	b, _ := c.Compile([]byte(`{"$id":"http://x/a","type":"integer"}`))
	fmt.Println(a == b, c.AssertFormat)
}
