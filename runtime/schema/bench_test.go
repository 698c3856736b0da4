package schema

import (
	"crypto/sha256"
	"testing"
)

// benchSchema is an order schema: 31 properties over five nested objects,
// with $defs, refs (one recursive), oneOf, enums, patterns and bounds.
const benchSchema = `{
  "$schema": "https://json-schema.org/draft/2020-12/schema",
  "title": "Order",
  "type": "object",
  "properties": {
    "id": {"type": "string", "pattern": "^ord_[a-z0-9]{8}$"},
    "status": {"enum": ["new", "paid", "shipped", "cancelled"]},
    "created": {"type": "string", "format": "date-time"},
    "customer": {
      "type": "object",
      "properties": {
        "name": {"type": "string", "minLength": 1, "maxLength": 200},
        "email": {"type": "string", "format": "email", "pattern": "@"},
        "phone": {"type": ["string", "null"]},
        "vip": {"type": "boolean"},
        "address": {"$ref": "#/$defs/address"}
      },
      "required": ["name", "email"],
      "additionalProperties": false
    },
    "shipping": {"$ref": "#/$defs/address"},
    "lines": {"type": "array", "items": {"$ref": "#/$defs/line"}, "minItems": 1, "maxItems": 100},
    "total": {"type": "number", "minimum": 0, "multipleOf": 0.01},
    "currency": {"type": "string", "pattern": "^[A-Z]{3}$"},
    "notes": {"type": "array", "items": {"type": "string", "maxLength": 500}, "uniqueItems": true},
    "discount": {"oneOf": [
      {"type": "object", "properties": {"kind": {"const": "percent"}, "value": {"type": "number", "exclusiveMinimum": 0, "maximum": 100}}, "required": ["kind", "value"], "additionalProperties": false},
      {"type": "object", "properties": {"kind": {"const": "amount"}, "value": {"type": "number", "exclusiveMinimum": 0}}, "required": ["kind", "value"], "additionalProperties": false}
    ]},
    "category": {"$ref": "#/$defs/category"}
  },
  "required": ["id", "status", "customer", "lines", "total", "currency"],
  "additionalProperties": false,
  "$defs": {
    "address": {
      "type": "object",
      "properties": {
        "street": {"type": "string", "minLength": 1},
        "city": {"type": "string", "minLength": 1},
        "zip": {"type": "string", "pattern": "^[0-9]{4,5}$"},
        "country": {"enum": ["NO", "SE", "DK", "FI", "DE"]}
      },
      "required": ["street", "city", "country"],
      "additionalProperties": false
    },
    "line": {
      "type": "object",
      "properties": {
        "sku": {"type": "string", "pattern": "^[A-Z]{2}-[0-9]+$"},
        "qty": {"type": "integer", "minimum": 1},
        "price": {"type": "number", "minimum": 0, "multipleOf": 0.01},
        "options": {"type": "object", "maxProperties": 5, "additionalProperties": {"type": ["string", "number", "boolean"]}},
        "gift": {"type": "boolean"}
      },
      "required": ["sku", "qty", "price"],
      "additionalProperties": false
    },
    "category": {
      "type": "object",
      "properties": {
        "name": {"type": "string"},
        "parent": {"$ref": "#/$defs/category"}
      },
      "required": ["name"]
    }
  }
}`

// benchInstance matches benchSchema (about 1.6 KB).
const benchInstance = `{
  "id": "ord_a1b2c3d4", "status": "paid", "created": "2025-06-01T12:00:00Z",
  "customer": {"name": "Kari Nordmann", "email": "kari@example.no", "phone": null, "vip": true,
    "address": {"street": "Storgata 1", "city": "Oslo", "zip": "0155", "country": "NO"}},
  "shipping": {"street": "Lillegata 2", "city": "Bergen", "zip": "5003", "country": "NO"},
  "lines": [
    {"sku": "AB-1001", "qty": 2, "price": 199.90, "options": {"color": "red", "size": 42, "wrap": false}},
    {"sku": "CD-2002", "qty": 1, "price": 49.50, "gift": true},
    {"sku": "EF-3003", "qty": 3, "price": 9.99, "options": {"engraving": "K.N."}},
    {"sku": "GH-4004", "qty": 1, "price": 1299.00},
    {"sku": "IJ-5005", "qty": 12, "price": 0.75, "options": {"pack": "dozen"}},
    {"sku": "KL-6006", "qty": 1, "price": 15.00, "gift": false},
    {"sku": "MN-7007", "qty": 4, "price": 3.25}
  ],
  "total": 1833.78, "currency": "NOK",
  "notes": ["Leave at the door", "Call before delivery", "Fragile: glass inside", "Second floor, no lift"],
  "discount": {"kind": "percent", "value": 10},
  "category": {"name": "kitchen", "parent": {"name": "home", "parent": {"name": "all"}}}
}`

func compileUncached(raw []byte) (*compiled, *GateError) {
	doc, jerr := decodeJSON(raw, maxSchemaDepth, false)
	if jerr != nil {
		return nil, gateErr(jerr.Pointer, "", jerr.Reason)
	}
	canonical := appendCanonical(nil, doc)
	return build(doc, canonical, sha256.Sum256(canonical))
}

func TestBenchFixtures(t *testing.T) {
	s := mustCompile(t, benchSchema)
	if err := s.Validate([]byte(benchInstance)); err != nil {
		t.Fatalf("benchInstance: %v", err)
	}
	if _, err := compileUncached([]byte(benchSchema)); err != nil {
		t.Fatalf("compileUncached: %v", err)
	}
}

func BenchmarkCompileUncached(b *testing.B) {
	raw := []byte(benchSchema)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := compileUncached(raw); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkCompileCached(b *testing.B) {
	raw := []byte(benchSchema)
	if _, err := Compile(raw); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Compile(raw); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkValidate(b *testing.B) {
	s := mustCompile(b, benchSchema)
	in := []byte(benchInstance)
	b.SetBytes(int64(len(in)))
	b.ReportAllocs()
	for b.Loop() {
		if err := s.Validate(in); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkValidateInvalid(b *testing.B) {
	s := mustCompile(b, benchSchema)
	in := []byte(`{"id":"x","status":"lost","customer":{"name":""},"lines":[{"sku":"a","qty":0,"price":0.001}],"total":-1,"currency":"nok","extra":1}`)
	b.ReportAllocs()
	for b.Loop() {
		if err := s.Validate(in); err == nil {
			b.Fatal("accepted")
		}
	}
}

// BenchmarkValidateToolArgs checks a run_js call's arguments, with quick
// and with the library alone:
//
//	go test -run '^$' -bench ValidateToolArgs ./runtime/schema
func BenchmarkValidateToolArgs(b *testing.B) {
	s := mustCompile(b, `{"type":"object","properties":{"code":{"type":"string","minLength":1,"description":"The body of an async JavaScript function."}},"required":["code"],"additionalProperties":false}`)
	in := []byte(`{"code":"const r = await kv.get({key: \"a\"});\nreturn r.value * 2;"}`)
	slow := &Schema{raw: s.raw, c: new(*s.c)}
	slow.c.quick = nil
	for _, bc := range []struct {
		name string
		s    *Schema
	}{{"quick", s}, {"library", slow}} {
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if err := bc.s.Validate(in); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
