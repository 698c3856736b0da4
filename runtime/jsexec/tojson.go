package jsexec

import (
	"math"
	"math/big"
	"reflect"
	"strconv"

	"github.com/dop251/goja"
)

// The JSON the host receives from a script (a capability argument, the
// returned value) is written by hostJSON, a walker in Go over the script's
// values, not by the realm's JSON.stringify: JSON.stringify looks toJSON up
// through the prototype chain and reads array holes from the prototypes,
// so a script that polluted Object.prototype, Array.prototype or
// Date.prototype would rewrite what every later script of the run sends to
// the host. The walker reads only what the value itself holds:
//
//   - an object's own enumerable string-keyed properties, in their order;
//     getters and proxy traps on the value itself run (they are the
//     script's own), under the script's time limit;
//   - an array's elements 0..length-1, a missing (inherited) one as null;
//   - toJSON only when it is an own property of the value (called with the
//     key, as JSON.stringify does); an inherited toJSON, including one on a
//     class's prototype, is ignored;
//   - a Date as its ISO string (null when invalid), a Number, String or
//     Boolean object as its primitive, through the original builtins, so
//     that Date.prototype.toISOString or valueOf pollution changes nothing;
//   - undefined, functions and symbols are omitted (null in an array);
//     NaN and the infinities are null; a BigInt, a cycle or nesting deeper
//     than maxJSONDepth throws a TypeError.
//
// Its text is that of JSON.stringify for any value whose prototypes hold no
// toJSON and were not tampered with, except for that depth bound and an
// object key that is not well-formed UTF-16 (a lone surrogate), which Go
// cannot spell and which is left out (TestHostJSONMatchesStringify).

// maxJSONDepth bounds the nesting of the JSON the host receives. Go's
// encoding/json refuses documents nested 10,000 deep (the worker's frames
// embed values two levels down), and no real argument or result comes near.
const maxJSONDepth = 1000

// jsonCheckEvery is how many values the walker writes between two checks
// of the realm's interrupt flag: its own loops run no JavaScript, so
// without them a huge sparse array would keep it past the time limit.
const jsonCheckEvery = 1024

var typeBigInt = reflect.TypeOf((*big.Int)(nil))

// jsonTooBig unwinds a walk whose text passed its bound.
type jsonTooBig struct{}

// jsonWalk is one serialization.
type jsonWalk struct {
	r       *realm
	max     int
	buf     []byte
	onPath  map[*goja.Object]struct{} // the objects being written, for cycles
	steps   int
	defined bool // the value has a JSON form
	tooBig  bool // the text passed max bytes
}

// hostJSON serializes v for the host. defined is false when v has no JSON
// form (undefined, a function, a symbol); tooBig says the text passed max
// bytes (text is then cut). err is a *goja.Exception the script can see (a
// throwing toJSON, getter or trap; a cycle, a BigInt, too deep a value) or
// an uncatchable error (an interrupt, a stack overflow).
func (r *realm) hostJSON(v goja.Value, max int) (text []byte, defined, tooBig bool, err error) {
	w := &jsonWalk{r: r, max: max, onPath: map[*goja.Object]struct{}{}}
	r.walks = append(r.walks, w)
	defer func() { r.walks = r.walks[:len(r.walks)-1] }()
	// Through a Callable, so that an uncatchable error becomes err and a
	// JavaScript exception an *Exception, wherever this is called from.
	if _, err := r.walkF(goja.Undefined(), v); err != nil {
		return nil, false, false, err
	}
	return w.buf, w.defined, w.tooBig, nil
}

// walkNative is the body of realm.walkF: it serializes its argument into
// the innermost walk (a getter may call a capability, which starts a walk
// of its own).
func (r *realm) walkNative(call goja.FunctionCall) goja.Value {
	w := r.walks[len(r.walks)-1]
	defer func() {
		if x := recover(); x != nil {
			if _, ok := x.(jsonTooBig); ok {
				w.tooBig = true
				return
			}
			panic(x)
		}
	}()
	w.defined = w.value("", call.Argument(0))
	return goja.Undefined()
}

// value writes v, the property key of its holder, and reports whether it
// has a JSON form (nothing is written if not).
func (w *jsonWalk) value(key string, v goja.Value) bool {
	w.tick()
	if o, ok := v.(*goja.Object); ok {
		if w.has(o, w.r.toJSONKey) {
			if f, ok := goja.AssertFunction(o.Get("toJSON")); ok {
				v = w.call(f, o, w.r.vm.ToValue(key))
			}
		}
	}
	return w.plain(v)
}

// plain writes v once toJSON has been applied.
func (w *jsonWalk) plain(v goja.Value) bool {
	if v == nil || goja.IsUndefined(v) {
		return false
	}
	if goja.IsNull(v) {
		w.write("null")
		return true
	}
	switch x := v.(type) {
	case *goja.Symbol:
		return false
	case *goja.Object:
		return w.object(x)
	}
	switch x := v.Export().(type) {
	case bool:
		if x {
			w.write("true")
		} else {
			w.write("false")
		}
	case int64:
		w.buf = strconv.AppendInt(w.buf, x, 10)
		w.check()
	case float64:
		if math.IsNaN(x) || math.IsInf(x, 0) {
			w.write("null")
		} else {
			w.write(v.String()) // ECMAScript's Number::toString
		}
	case string:
		w.str(v, x)
	case *big.Int:
		panic(w.r.vm.NewTypeError("Do not know how to serialize a BigInt"))
	default:
		return false
	}
	return true
}

// object writes a non-null object.
func (w *jsonWalk) object(o *goja.Object) bool {
	switch o.ClassName() {
	case "Number":
		return w.plain(w.call(w.r.numberValue, o))
	case "String":
		return w.plain(w.call(w.r.stringValue, o))
	case "Boolean":
		return w.plain(w.call(w.r.booleanValue, o))
	case "Date":
		t := w.call(w.r.dateTime, o).ToFloat()
		if math.IsNaN(t) {
			w.write("null")
			return true
		}
		return w.plain(w.call(w.r.dateISO, o))
	case "RawJSON":
		// JSON.rawJSON's frozen, prototype-free holder of checked JSON text.
		w.write(o.Get("rawJSON").String())
		return true
	case "Object":
		if o.ExportType() == typeBigInt { // Object(1n)
			panic(w.r.vm.NewTypeError("Do not know how to serialize a BigInt"))
		}
	}
	if _, ok := goja.AssertFunction(o); ok {
		return false
	}
	if _, seen := w.onPath[o]; seen {
		panic(w.r.vm.NewTypeError("Converting circular structure to JSON"))
	}
	if len(w.onPath) >= maxJSONDepth {
		panic(w.r.vm.NewTypeError("the value is nested more than %d levels deep", maxJSONDepth))
	}
	w.onPath[o] = struct{}{}
	defer delete(w.onPath, o)

	if w.call(w.r.isArray, goja.Undefined(), o).ToBoolean() {
		n := o.Get("length").ToInteger()
		w.write("[")
		for i := int64(0); i < n; i++ {
			if i > 0 {
				w.write(",")
			}
			k := strconv.FormatInt(i, 10)
			if !w.has(o, w.r.vm.ToValue(k)) || !w.value(k, o.Get(k)) {
				w.write("null")
			}
		}
		w.write("]")
		return true
	}
	w.write("{")
	first := true
	for _, k := range o.Keys() {
		kv := w.r.vm.ToValue(k)
		if !w.has(o, kv) {
			continue // deleted by a getter, or a key Go cannot spell
		}
		mark := len(w.buf)
		if !first {
			w.write(",")
		}
		w.str(kv, k)
		w.write(":")
		if w.value(k, o.Get(k)) {
			first = false
		} else {
			w.buf = w.buf[:mark]
		}
	}
	w.write("}")
	return true
}

// str writes a string value whose Go form is s.
func (w *jsonWalk) str(v goja.Value, s string) {
	for i := 0; i < len(s); i++ {
		if s[i] >= 0x80 {
			// Non-ASCII text may hold lone surrogates, which Go's form has
			// lost: the original JSON.stringify escapes them. For a
			// primitive string it consults no toJSON.
			w.write(w.call(w.r.stringify, goja.Undefined(), v).String())
			return
		}
	}
	w.buf = append(w.buf, '"')
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '"' || c == '\\':
			w.buf = append(w.buf, '\\', c)
		case c == '\b':
			w.buf = append(w.buf, '\\', 'b')
		case c == '\t':
			w.buf = append(w.buf, '\\', 't')
		case c == '\n':
			w.buf = append(w.buf, '\\', 'n')
		case c == '\f':
			w.buf = append(w.buf, '\\', 'f')
		case c == '\r':
			w.buf = append(w.buf, '\\', 'r')
		case c < 0x20:
			const hex = "0123456789abcdef"
			w.buf = append(w.buf, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xF])
		default:
			w.buf = append(w.buf, c)
		}
	}
	w.buf = append(w.buf, '"')
	w.check()
}

// has reports whether o has the own property key (a proxy's trap runs).
func (w *jsonWalk) has(o *goja.Object, key goja.Value) bool {
	return w.call(w.r.hasOwn, o, key).ToBoolean()
}

// call calls f, letting any error unwind the walk as a throw would.
func (w *jsonWalk) call(f goja.Callable, this goja.Value, args ...goja.Value) goja.Value {
	v, err := f(this, args...)
	if err != nil {
		panic(err)
	}
	return v
}

// tick runs a trivial JavaScript function every jsonCheckEvery values: if
// the script was stopped, the interrupt unwinds the walk there.
func (w *jsonWalk) tick() {
	w.steps++
	if w.steps%jsonCheckEvery == 0 {
		w.call(w.r.checkpoint, goja.Undefined())
	}
}

func (w *jsonWalk) write(s string) {
	w.buf = append(w.buf, s...)
	w.check()
}

func (w *jsonWalk) check() {
	if len(w.buf) > w.max {
		panic(jsonTooBig{})
	}
}
