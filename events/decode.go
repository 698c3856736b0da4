package events

import (
	"encoding/json"
	"strconv"
)

// decodeFast decodes the envelope as Encode writes it: the known keys in
// any order, each at most once, with plain (escape-free) strings, integer
// numbers and an inline object payload. It makes one pass over the body,
// where encoding/json makes two (a validity scan of everything, then the
// decode, which scans the payload again to find its end): on every read of
// the log the payload is most of the bytes. Anything else (an unknown or
// repeated or escaped key, a null, an escaped string, a number that is not
// a plain integer, a data_ref, invalid JSON) makes ok false, and the caller
// decodes with encoding/json, so the result is always encoding/json's:
// FuzzDecodeFastMatchesEncodingJSON holds the two together.
func decodeFast(b []byte) (e Envelope, ok bool) {
	p := scanner{b: b}
	p.ws()
	if !p.byte('{') {
		return Envelope{}, false
	}
	var seen uint16
	p.ws()
	if p.peek() == '}' {
		p.i++
		p.ws()
		return e, p.i == len(b)
	}
	for {
		p.ws()
		key, ok := p.plainString()
		if !ok {
			return Envelope{}, false
		}
		p.ws()
		if !p.byte(':') {
			return Envelope{}, false
		}
		p.ws()
		bit := uint16(0)
		switch key {
		case "type":
			bit = 1 << 0
			s, ok := p.plainString()
			if !ok {
				return Envelope{}, false
			}
			e.Type = Type(s)
		case "version":
			bit = 1 << 1
			n, ok := p.integer(strconv.IntSize)
			if !ok {
				return Envelope{}, false
			}
			e.Version = int(n)
		case "session_id":
			bit = 1 << 2
			if e.SessionID, ok = p.plainString(); !ok {
				return Envelope{}, false
			}
		case "run_id":
			bit = 1 << 3
			if e.RunID, ok = p.plainString(); !ok {
				return Envelope{}, false
			}
		case "revision":
			bit = 1 << 4
			if e.Revision, ok = p.integer(64); !ok {
				return Envelope{}, false
			}
		case "epoch":
			bit = 1 << 5
			if e.Epoch, ok = p.integer(64); !ok {
				return Envelope{}, false
			}
		case "time":
			bit = 1 << 6
			start := p.i
			if _, ok := p.plainString(); !ok {
				return Envelope{}, false
			}
			// time.Time's own decoding, as encoding/json calls it.
			if e.Time.UnmarshalJSON(b[start:p.i]) != nil {
				return Envelope{}, false
			}
		case "data":
			bit = 1 << 7
			if p.peek() != '{' {
				return Envelope{}, false
			}
			start := p.i
			if !p.value(2) { // the payload is the body's second level
				return Envelope{}, false
			}
			e.Data = append(json.RawMessage(nil), b[start:p.i]...)
		default: // data_ref, unknown or case-folded keys: encoding/json decides
			return Envelope{}, false
		}
		if seen&bit != 0 {
			return Envelope{}, false // a repeated key: the last one wins there
		}
		seen |= bit
		p.ws()
		switch {
		case p.byte(','):
		case p.byte('}'):
			p.ws()
			return e, p.i == len(b)
		default:
			return Envelope{}, false
		}
	}
}

type scanner struct {
	b []byte
	i int
}

func (p *scanner) peek() byte {
	if p.i < len(p.b) {
		return p.b[p.i]
	}
	return 0
}

func (p *scanner) byte(c byte) bool {
	if p.peek() == c {
		p.i++
		return true
	}
	return false
}

func (p *scanner) ws() {
	for p.i < len(p.b) {
		switch p.b[p.i] {
		case ' ', '\t', '\n', '\r':
			p.i++
		default:
			return
		}
	}
}

// plainString reads a string without escapes, control characters or
// bytes above ASCII (those decode differently from their bytes, or are
// replaced): what Encode writes for types, IDs and times.
func (p *scanner) plainString() (string, bool) {
	if !p.byte('"') {
		return "", false
	}
	start := p.i
	for p.i < len(p.b) {
		c := p.b[p.i]
		switch {
		case c == '"':
			s := string(p.b[start:p.i])
			p.i++
			return s, true
		case c == '\\' || c < 0x20 || c >= 0x80:
			return "", false
		}
		p.i++
	}
	return "", false
}

// integer reads a number in JSON's grammar that is an integer (no
// fraction, no exponent: encoding/json refuses those for an int field)
// and fits bits.
func (p *scanner) integer(bits int) (int64, bool) {
	start := p.i
	if !p.number() {
		return 0, false
	}
	tok := p.b[start:p.i]
	for _, c := range tok {
		if c == '.' || c == 'e' || c == 'E' {
			return 0, false
		}
	}
	n, err := strconv.ParseInt(string(tok), 10, bits)
	return n, err == nil
}

// maxDepth is encoding/json's nesting limit: it refuses a value nested
// deeper (the body's object is level 1).
const maxDepth = 10000

// value checks one JSON value at nesting level depth and moves past it. It
// accepts JSON's grammar (RFC 8259), as encoding/json's validity scan does
// (strings are not checked for UTF-8 there either), and refuses a level
// encoding/json would refuse, and the one below it.
func (p *scanner) value(depth int) bool {
	if depth >= maxDepth {
		return false
	}
	switch c := p.peek(); {
	case c == '{':
		p.i++
		p.ws()
		if p.byte('}') {
			return true
		}
		for {
			p.ws()
			if !p.str() {
				return false
			}
			p.ws()
			if !p.byte(':') {
				return false
			}
			p.ws()
			if !p.value(depth + 1) {
				return false
			}
			p.ws()
			if p.byte('}') {
				return true
			}
			if !p.byte(',') {
				return false
			}
		}
	case c == '[':
		p.i++
		p.ws()
		if p.byte(']') {
			return true
		}
		for {
			p.ws()
			if !p.value(depth + 1) {
				return false
			}
			p.ws()
			if p.byte(']') {
				return true
			}
			if !p.byte(',') {
				return false
			}
		}
	case c == '"':
		return p.str()
	case c == '-' || (c >= '0' && c <= '9'):
		return p.number()
	default:
		for _, lit := range []string{"true", "false", "null"} {
			if len(p.b)-p.i >= len(lit) && string(p.b[p.i:p.i+len(lit)]) == lit {
				p.i += len(lit)
				return true
			}
		}
		return false
	}
}

// str checks a string with any valid escapes.
func (p *scanner) str() bool {
	if !p.byte('"') {
		return false
	}
	for p.i < len(p.b) {
		c := p.b[p.i]
		switch {
		case c == '"':
			p.i++
			return true
		case c < 0x20:
			return false
		case c == '\\':
			p.i++
			switch p.peek() {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
				p.i++
			case 'u':
				p.i++
				for k := 0; k < 4; k++ {
					if !isHex(p.peek()) {
						return false
					}
					p.i++
				}
			default:
				return false
			}
		default:
			p.i++
		}
	}
	return false
}

func isHex(c byte) bool {
	return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F')
}

// number checks a number in JSON's grammar.
func (p *scanner) number() bool {
	p.byte('-')
	switch {
	case p.byte('0'):
	case p.peek() >= '1' && p.peek() <= '9':
		for p.peek() >= '0' && p.peek() <= '9' {
			p.i++
		}
	default:
		return false
	}
	if p.byte('.') {
		if !(p.peek() >= '0' && p.peek() <= '9') {
			return false
		}
		for p.peek() >= '0' && p.peek() <= '9' {
			p.i++
		}
	}
	if p.byte('e') || p.byte('E') {
		if !p.byte('+') {
			p.byte('-')
		}
		if !(p.peek() >= '0' && p.peek() <= '9') {
			return false
		}
		for p.peek() >= '0' && p.peek() <= '9' {
			p.i++
		}
	}
	return true
}

// decodeEnvelope decodes with the fast path, encoding/json otherwise.
func decodeEnvelope(body []byte) (Envelope, error) {
	if e, ok := decodeFast(body); ok {
		return e, nil
	}
	var e Envelope
	err := json.Unmarshal(body, &e)
	return e, err
}
