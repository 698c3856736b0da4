// Package redacttest spells a secret the ways encoders spell it, for tests
// that plant a secret and search everything a program hands out for it.
//
// It is a second, plain implementation of what package redact matches: the
// outputs of the standard encoders (encoding/json with and without HTML
// escaping, nested up to four times; net/url; html; strconv.Quote;
// encoding/base64 at each alignment), listed, not parsed. A test searches
// an output for every Form's Needle.
package redacttest

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"html"
	"net/url"
	"strconv"
	"strings"
	"text/template"
)

// Form is one spelling of a secret.
type Form struct {
	// Name says which encoding: "raw", "json-go-2" (encoding/json, twice),
	// "json-js-3" (JSON.stringify's escaping, three times), "percent",
	// "html", "base64-std-1" (the core at alignment 1) ...
	Name string
	// Text is the secret so encoded, whole (for base64, the encoding of
	// the secret at that alignment, with the bytes around it zero).
	Text string
	// Needle is what to search an output for: Text, or for base64 the
	// core, the characters the secret's bits alone decide.
	Needle string
}

// MaxDepth is how many times Forms nests JSON escaping.
const MaxDepth = 4

// Forms are secret's spellings, each distinct needle once.
func Forms(secret string) []Form {
	var out []Form
	add := func(name, text, needle string) {
		for _, f := range out {
			if f.Needle == needle {
				return
			}
		}
		out = append(out, Form{Name: name, Text: text, Needle: needle})
	}
	add("raw", secret, secret)
	goJS, jsJS := secret, secret
	for d := 1; d <= MaxDepth; d++ {
		goJS, jsJS = JSONString(goJS, true), JSONString(jsJS, false)
		add("json-go-"+strconv.Itoa(d), goJS, goJS)
		add("json-js-"+strconv.Itoa(d), jsJS, jsJS)
	}
	q := strconv.Quote(secret)
	add("go-quoted", q[1:len(q)-1], q[1:len(q)-1])
	add("percent-query", url.QueryEscape(secret), url.QueryEscape(secret))
	add("percent-path", url.PathEscape(secret), url.PathEscape(secret))
	add("percent-lower", lowerHex(url.QueryEscape(secret)), lowerHex(url.QueryEscape(secret)))
	add("html", html.EscapeString(secret), html.EscapeString(secret))
	if !strings.Contains(secret, "\x00") { // text/template writes NUL as U+FFFD: the secret is gone
		add("html-template", template.HTMLEscapeString(secret), template.HTMLEscapeString(secret))
	}
	named := strings.NewReplacer("&", "&amp;", "<", "&lt;", ">", "&gt;", `"`, "&quot;", "'", "&#x27;").Replace(secret)
	add("html-named", named, named)
	inHTML := html.EscapeString(JSONString(secret, false))
	add("json-in-html", inHTML, inHTML)
	for _, enc := range []struct {
		name string
		enc  *base64.Encoding
	}{{"std", base64.StdEncoding}, {"url", base64.URLEncoding}, {"std-raw", base64.RawStdEncoding}, {"url-raw", base64.RawURLEncoding}} {
		for a := 0; a < 3; a++ {
			text, core := Base64(enc.enc, secret, a)
			if core != "" {
				add("base64-"+enc.name+"-"+strconv.Itoa(a), text, core)
			}
		}
	}
	return out
}

// JSONString is s as the inside of a JSON string literal: as encoding/json
// writes it (html: <, > and & as \u003c ...), or as JavaScript's
// JSON.stringify does.
func JSONString(s string, html bool) string {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(html)
	_ = enc.Encode(s)
	out := strings.TrimSuffix(b.String(), "\n")
	return out[1 : len(out)-1]
}

// Base64 is secret encoded after align zero bytes (and before two more),
// and its core: the characters whose bits all come from secret; "" when
// that is shorter than 7 characters.
func Base64(enc *base64.Encoding, secret string, align int) (text, core string) {
	buf := make([]byte, align+len(secret)+2)
	copy(buf[align:], secret)
	text = enc.EncodeToString(buf)
	from, to := (8*align+5)/6, 8*(align+len(secret))/6
	if to-from < 7 {
		return text, ""
	}
	return text, text[from:to]
}

// lowerHex writes the hex digits of s's percent escapes in lower case.
func lowerHex(s string) string {
	b := []byte(s)
	for i := 0; i+2 < len(b); i++ {
		if b[i] == '%' {
			b[i+1], b[i+2] = bytes.ToLower(b[i+1 : i+2])[0], bytes.ToLower(b[i+2 : i+3])[0]
		}
	}
	return string(b)
}

// Find is the name of the first form of secret found in text, or "".
func Find(text, secret string) string {
	for _, f := range Forms(secret) {
		if strings.Contains(text, f.Needle) {
			return f.Name
		}
	}
	return ""
}
