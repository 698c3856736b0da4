package schema

import ("testing";"fmt")

func TestScratch(t *testing.T) {
	for _, c := range []struct{ s, i string }{
		{`{"type":"object","properties":{"a":{"type":"string","minLength":3},"b":{"enum":[1,2,{"x":1}]}},"required":["a","c"],"additionalProperties":false}`, `{"b":{"y":[1]},"z":1}`},
		{`{"type":"object","properties":{"a":{"type":"string","minLength":3}},"required":["a"]}`, `{}`},
		{`{"$defs":{"n":{"type":"object","properties":{"v":{"type":"integer"},"kids":{"type":"array","items":{"$ref":"#/$defs/n"}}}}},"$ref":"#/$defs/n"}`, `{"v":1,"kids":[{"v":2,"kids":[{"v":"x"}]}]}`},
		{`{"multipleOf":0.01}`, `0.071`},
		{`{"multipleOf":0.01}`, `0.07`},
		{`{"const":9007199254740993}`, `9007199254740992`},
		{`{"type":"string","format":"email"}`, `"nope"`},
		{`{"anyOf":[{"type":"string"},{"type":"integer","minimum":3}]}`, `1`},
		{`{"not":{"type":"string"}}`, `"x"`},
		{`{"prefixItems":[{"type":"string"},{"type":"integer"}],"items":false}`, `["a","b",3]`},
		{`{"uniqueItems":true}`, `[1,2,1.0]`},
		{`{"type":"string","pattern":"^a+$"}`, `"b"`},
		{`false`, `1`},
		{`{"properties":{"a":false}}`, `{"a":1}`},
		{`{"type":"object"}`, `{"a":1e99999}`},
		{`{"type":"object"}`, `{"a":1,}`},
	} {
		s, err := Compile([]byte(c.s))
		if err != nil { fmt.Println("COMPILE", err); continue }
		fmt.Println(s.Validate([]byte(c.i)))
	}
	out, _ := Compile([]byte(`{"type":"object","properties":{"answer":{"$ref":"#/$defs/s"}},"required":["answer"],"additionalProperties":false,"$defs":{"s":{"type":"string","minLength":1}}}`))
	cs, err := CompletionSchema(out)
	fmt.Println(err)
	fmt.Println(string(cs.Raw()))
	for _, i := range []string{`{"type":"output","output":{"answer":""}}`, `{"type":"output","output":{"answer":"x"}}`, `{"type":"needs_input","question":" "}`, `{"type":"needs_input"}`, `{"type":"output","output":{"answer":"x"},"question":"q"}`, `{}`} {
		fmt.Println(i, "=>", cs.Validate([]byte(i)))
	}
	for _, s := range []string{`{"minLenght":3}`, `{"$ref":"http://x/y"}`, `{"$ref":"#/$defs/x"}`, `{"$defs":{"a":{"$ref":"#/$defs/b"},"b":{"allOf":[{"$ref":"#/$defs/a"}]}}}`, `{"type":"strin"}`, `{"a":1,}`, `[1]`, `{"properties":{"a":3}}`, `{"pattern":"(?=a)"}`, `{"minimum":1e5000}`} {
		_, err := Compile([]byte(s))
		fmt.Println(s, "=>", err)
	}
}
