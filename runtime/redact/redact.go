package redact

import (
	"cmp"
	"encoding/base64"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"unicode/utf16"
	"unicode/utf8"
)

// Mark is what a secret is replaced with.
const Mark = "[REDACTED]"

// MinCore is the shortest base64 core a Set replaces: shorter ones (of
// secrets under 6 bytes) would match ordinary base64 by chance. A secret of
// 6 bytes has cores of 7 and 8 characters (42 bits and more).
const MinCore = 7

// Set is a compiled set of secrets. The zero value and a nil *Set redact
// nothing. A Set is immutable and safe for concurrent use.
type Set struct {
	secrets []*secret
}

// New compiles secrets into a Set. Empty values are skipped and repeats
// dropped; every other value is a pattern, whatever its length (filter
// first: see runtime.NewSecrets). Longer secrets are matched first, so a
// value that holds another ("Bearer <token>" and <token>) is replaced
// whole.
func New(secrets ...string) *Set {
	vals := make([]string, 0, len(secrets))
	for _, s := range secrets {
		if s != "" && !slices.Contains(vals, s) {
			vals = append(vals, s)
		}
	}
	slices.SortFunc(vals, func(a, b string) int {
		if c := cmp.Compare(len(b), len(a)); c != 0 {
			return c
		}
		return strings.Compare(a, b)
	})
	set := &Set{secrets: make([]*secret, len(vals))}
	for i, v := range vals {
		set.secrets[i] = compile(v)
	}
	return set
}

// Len is the number of secrets in s.
func (s *Set) Len() int {
	if s == nil {
		return 0
	}
	return len(s.secrets)
}

// Redact replaces every occurrence of each secret of s in text, in any of
// the forms the package comment lists, with Mark. A text that holds none
// is returned as it is.
func (s *Set) Redact(text string) string {
	if s == nil {
		return text
	}
	for _, sec := range s.secrets {
		text = sec.redact(text)
	}
	return text
}

// secret is one compiled secret.
type secret struct {
	toks []token
	// anchorText is toks[anchorFrom:anchorTo], the longest run of plain
	// tokens: every textual form holds it as it is. Empty when the secret
	// has no plain byte (then every position first allows is tried).
	anchorText           string
	anchorFrom, anchorTo int
	// first marks the bytes a form of toks[0] can begin with (for a
	// secret without an anchor).
	first [256]bool
	// trailing counts the backslash tokens the secret ends with.
	trailing int
	// probe finds the anchor; cores find the base64 cores.
	probe probe
	cores []probe
}

// probe finds a needle by a short piece of it: strings.Index is fastest
// for needles of up to 32 bytes or so, and one piece can stand for the
// two alphabets of a base64 core.
type probe struct {
	piece string
	// at is where piece sits in each of forms.
	at int
	// forms are the needles, all of one length.
	forms []string
}

// maxPiece is the longest piece a probe searches for.
const maxPiece = 32

// newProbe is a probe of forms (one length, at least one): its piece is a
// window of at most maxPiece bytes where all forms agree, starting at the
// rarest byte (strings.Index scans for a piece's first byte: a common one
// stops it at every other word). It has no piece when the forms agree
// nowhere.
func newProbe(forms ...string) probe {
	n := len(forms[0])
	window := func(i int) int { // the agreeing bytes from i, at most maxPiece
		j := i
		for j < n && j-i < maxPiece && agree(forms, j) {
			j++
		}
		return j - i
	}
	longest := 0
	for i := range n {
		longest = max(longest, window(i))
	}
	best, bestAt, bestLen := -1, 0, 0
	for i := range n {
		w := window(i)
		if w == 0 || w < min(8, longest) { // too short to stand for the needle
			continue
		}
		r := rarity(forms[0][i]) * 256
		if w > 1 {
			r += rarity(forms[0][i+1])
		}
		if r > best || r == best && w > bestLen {
			best, bestAt, bestLen = r, i, w
		}
	}
	if best < 0 {
		return probe{}
	}
	return probe{piece: forms[0][bestAt : bestAt+bestLen], at: bestAt, forms: forms}
}

// common are the bytes of English prose and JSON, the most frequent first.
const common = " etaoinsrhldcu\"m,fpgwyb.:v{}k01\n2_x-3j459876q/zTSAICMEN\\=PRDBLOFHWGU[]"

// rarity ranks a byte: higher is rarer in the text a redactor sees.
func rarity(c byte) int {
	if i := strings.IndexByte(common, c); i >= 0 {
		return i
	}
	return len(common)
}

func agree(forms []string, j int) bool {
	for _, f := range forms[1:] {
		if f[j] != forms[0][j] {
			return false
		}
	}
	return true
}

// find is the first of p's forms in text that starts at or after lo,
// looked for by its piece from from on: where it starts and ends.
func (p *probe) find(text string, from, lo int) (start, end int, ok bool) {
	for from <= len(text) {
		i := strings.Index(text[from:], p.piece)
		if i < 0 {
			return 0, 0, false
		}
		at := from + i - p.at
		if at >= lo {
			for _, f := range p.forms {
				if strings.HasPrefix(text[at:], f) {
					return at, at + len(f), true
				}
			}
		}
		from += i + 1
	}
	return 0, 0, false
}

// kind is what a token matches.
type kind uint8

const (
	// plain is an unreserved byte (A-Z a-z 0-9 - . _ ~), which no
	// encoding changes: it matches itself only.
	plain kind = iota
	// special is any other character: it matches its forms.
	special
	// backslash is '\': a run of one or more escape units (each a
	// backslash, percent-encoded or not), or one of its other forms.
	backslash
	// space is a run of whitespace in the secret: one or more whitespace
	// characters in any of their forms.
	space
)

// token is one character of a secret (or a run of its whitespace).
type token struct {
	kind kind
	b    byte // plain's byte
	// any are forms that may follow any number of escape units (none
	// included): the character itself, percent-encoded, HTML entities.
	any []string
	// esc are forms that follow at least one unit: JSON's \" \n \u003c,
	// Go's \x1b.
	esc []string
	// unitLike: a form may start where an escape unit does (a raw %).
	unitLike bool
}

func compile(v string) *secret {
	sec := &secret{toks: tokenize(v)}
	for i := range sec.toks {
		t := &sec.toks[i]
		for _, f := range append(append([]string(nil), t.any...), t.esc...) {
			t.unitLike = t.unitLike || f[0] == '\\' || strings.HasPrefix(f, "%5") || strings.HasPrefix("%5C", f) || strings.HasPrefix("%5c", f)
		}
	}
	for _, c := range cores(v) {
		p := newProbe(c...)
		if p.piece == "" { // no window the two alphabets share
			for _, f := range c {
				p = newProbe(f)
				sec.cores = append(sec.cores, p)
			}
			continue
		}
		sec.cores = append(sec.cores, p)
	}
	// The anchor: the longest run of plain tokens.
	best, bestFrom := 0, 0
	for i := 0; i < len(sec.toks); {
		if sec.toks[i].kind != plain {
			i++
			continue
		}
		j := i
		for j < len(sec.toks) && sec.toks[j].kind == plain {
			j++
		}
		if j-i > best {
			best, bestFrom = j-i, i
		}
		i = j
	}
	sec.anchorFrom, sec.anchorTo = bestFrom, bestFrom+best
	var a strings.Builder
	for _, t := range sec.toks[bestFrom : bestFrom+best] {
		a.WriteByte(t.b)
	}
	sec.anchorText = a.String()
	if sec.anchorText != "" {
		sec.probe = newProbe(sec.anchorText)
	}
	t0 := sec.toks[0]
	switch t0.kind {
	case plain:
		sec.first[t0.b] = true
	default:
		sec.first['\\'], sec.first['%'] = true, true
		for _, f := range append(append([]string(nil), t0.any...), t0.esc...) {
			sec.first[f[0]] = true
		}
	}
	for i := len(sec.toks) - 1; i >= 0 && sec.toks[i].kind == backslash; i-- {
		sec.trailing++
	}
	return sec
}

// unreserved reports whether c is a byte no encoding here changes
// (RFC 3986's unreserved set: JSON, HTML and percent-encoding keep it).
func unreserved(c byte) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '-' || c == '.' || c == '_' || c == '~'
}

// isSpace is the whitespace a secret's run of space matches.
func isSpace(r rune) bool { return r == ' ' || r == '\t' || r == '\n' || r == '\r' }

func tokenize(v string) []token {
	var out []token
	for i := 0; i < len(v); {
		c := v[i]
		if unreserved(c) {
			out = append(out, token{kind: plain, b: c})
			i++
			continue
		}
		r, n := utf8.DecodeRuneInString(v[i:])
		raw := v[i : i+n]
		i += n
		switch {
		case isSpace(r):
			if len(out) == 0 || out[len(out)-1].kind != space {
				out = append(out, spaceToken())
			}
		case r == '\\':
			t := token{kind: backslash}
			// Its raw and percent forms, and JSON's \\, are escape units
			// (matched as the run); what is left:
			t.any = entities('\\')
			t.esc = append([]string{"u005c", "u005C", "x5c", "x5C"}, escapedEntities(t.any)...)
			out = append(out, t)
		case r == utf8.RuneError && n == 1: // a byte that is no UTF-8
			out = append(out, token{kind: special, any: uniq(raw, percent(raw, true), percent(raw, false)),
				esc: uniq(fmt.Sprintf("x%02x", c), fmt.Sprintf("x%02X", c))})
		default:
			any, esc := forms(r, raw)
			out = append(out, token{kind: special, any: any, esc: esc})
		}
	}
	return out
}

// spaceToken matches whitespace: any of space, tab, newline and carriage
// return in any of their forms, and + (a percent-encoded space).
func spaceToken() token {
	t := token{kind: space, any: []string{"+"}}
	for _, r := range " \t\n\r" {
		any, esc := forms(r, string(r))
		t.any = append(t.any, any...)
		t.esc = append(t.esc, esc...)
	}
	t.any, t.esc = uniq(t.any...), uniq(t.esc...)
	return t
}

// shortEscapes are the one-letter escapes JSON (and JavaScript and Go
// string literals) write after a backslash.
var shortEscapes = map[rune]string{'"': `"`, '/': "/", '\'': "'", '\a': "a", '\b': "b", '\f': "f", '\n': "n", '\r': "r", '\t': "t", '\v': "v"}

// forms are the spellings of r (whose bytes are raw) that may follow any
// number of escape units, and those that need one at least.
func forms(r rune, raw string) (any, esc []string) {
	ents := entities(r)
	any = append([]string{raw, percent(raw, true), percent(raw, false)}, ents...)
	esc = escapedEntities(ents)
	if e, ok := shortEscapes[r]; ok {
		esc = append(esc, e)
	}
	if r < 0x10000 {
		esc = append(esc, fmt.Sprintf("u%04x", r), fmt.Sprintf("u%04X", r))
	} else {
		hi, lo := utf16.EncodeRune(r)
		esc = append(esc, fmt.Sprintf(`u%04x\u%04x`, hi, lo), fmt.Sprintf(`u%04X\u%04X`, hi, lo))
	}
	if r < 0x20 || r == 0x7f {
		esc = append(esc, fmt.Sprintf("x%02x", r), fmt.Sprintf("x%02X", r)) // Go's %q
	}
	if r >= 0x10000 {
		esc = append(esc, fmt.Sprintf("U%08x", r), fmt.Sprintf("U%08X", r)) // Go's %q, not printable
	}
	return uniq(any...), uniq(esc...)
}

// percent is raw with every byte percent-encoded.
func percent(raw string, upper bool) string {
	const lower, higher = "0123456789abcdef", "0123456789ABCDEF"
	digits := lower
	if upper {
		digits = higher
	}
	var b strings.Builder
	for i := 0; i < len(raw); i++ {
		b.WriteByte('%')
		b.WriteByte(digits[raw[i]>>4])
		b.WriteByte(digits[raw[i]&15])
	}
	return b.String()
}

// namedEntities are the HTML entity names of the characters escapers use
// them for.
var namedEntities = map[rune][]string{
	'"': {"quot", "QUOT"}, '&': {"amp", "AMP"}, '<': {"lt", "LT"}, '>': {"gt", "GT"},
	'\'': {"apos"}, '\\': {"bsol"}, '/': {"sol"}, '\n': {"NewLine"}, '\t': {"Tab"},
}

// entities are r's HTML character references: named, decimal and hex
// (either case of x and of the digits), with up to two leading zeros
// (PHP writes &#039;).
func entities(r rune) []string {
	var out []string
	for _, n := range namedEntities[r] {
		out = append(out, "&"+n+";")
	}
	dec := strconv.Itoa(int(r))
	hex := strconv.FormatInt(int64(r), 16)
	for zeros := 0; zeros <= 2; zeros++ {
		z := strings.Repeat("0", zeros)
		out = append(out, "&#"+z+dec+";")
		for _, x := range []string{"x", "X"} {
			out = append(out, "&#"+x+z+hex+";", "&#"+x+z+strings.ToUpper(hex)+";")
		}
	}
	return uniq(out...)
}

// escapedEntities are ents with their & escaped as encoding/json writes
// it (\u0026): an entity inside JSON, after the escape's backslashes.
func escapedEntities(ents []string) []string {
	out := make([]string, 0, len(ents))
	for _, e := range ents {
		out = append(out, "u0026"+e[1:])
	}
	return out
}

// uniq is the distinct non-empty values of vs, in their order.
func uniq(vs ...string) []string {
	out := make([]string, 0, len(vs))
	for _, v := range vs {
		if v != "" && !slices.Contains(out, v) {
			out = append(out, v)
		}
	}
	return out
}

// cores are the base64 cores of v: for each of the three alignments v can
// have in a longer encoded text (its first byte at an offset of 0, 1 or 2
// modulo 3), the characters whose six bits all come from v, in the
// standard and the URL alphabet (one form when they are the same). Padding
// is never in a core, so padded and unpadded encodings match alike.
func cores(v string) [][]string {
	var out [][]string
	url := strings.NewReplacer("+", "-", "/", "_")
	for a := 0; a < 3; a++ {
		buf := make([]byte, a+len(v))
		copy(buf[a:], v)
		enc := base64.StdEncoding.EncodeToString(buf)
		from, to := (8*a+5)/6, 8*(a+len(v))/6
		if to-from < MinCore {
			continue
		}
		c := enc[from:to]
		out = append(out, uniq(c, url.Replace(c)))
	}
	return out
}

// redact replaces every occurrence of sec in text.
func (sec *secret) redact(text string) string {
	text = sec.redactText(text)
	for i := range sec.cores {
		text = sec.cores[i].replace(text)
	}
	return text
}

// replace replaces every one of p's forms in text with Mark.
func (p *probe) replace(text string) string {
	var b strings.Builder
	last := 0
	for {
		start, end, ok := p.find(text, last, last)
		if !ok {
			break
		}
		if last == 0 && b.Len() == 0 {
			b.Grow(len(text))
		}
		b.WriteString(text[last:start])
		b.WriteString(Mark)
		last = end
	}
	if b.Len() == 0 {
		return text
	}
	b.WriteString(text[last:])
	return b.String()
}

// redactText replaces the textual forms: around each occurrence of the
// anchor, or, for a secret without one, from each position its first
// token can start at.
func (sec *secret) redactText(text string) string {
	var b strings.Builder
	matched := false
	last := 0 // text[:last] is dealt with
	for from := 0; from < len(text); {
		var start, end int
		ok := false
		if sec.anchorText != "" {
			a, z, found := sec.probe.find(text, from, from)
			if !found {
				break
			}
			start, end, ok = sec.around(text, last, a, z)
			if !ok {
				from = a + 1
				continue
			}
		} else {
			p := from
			for p < len(text) && !sec.first[text[p]] {
				p++
			}
			if p == len(text) {
				break
			}
			if start, end, ok = sec.from(text, p); !ok {
				// No start within the units that follow p matches either:
				// it reaches a subset of what p reached.
				q := p
				for u := unitAt(text, q); u > 0; u = unitAt(text, q) {
					q += u
				}
				from = q + 1
				continue
			}
		}
		if !matched {
			b.Grow(len(text))
			matched = true
		}
		b.WriteString(text[last:start])
		b.WriteString(Mark)
		last, from = end, end
	}
	if !matched {
		return text
	}
	b.WriteString(text[last:])
	return b.String()
}

// around matches sec around its anchor at text[a:z], no further left than
// lo: the tokens after the anchor forward from z, those before it backward
// from a. It returns the widest span.
func (sec *secret) around(text string, lo, a, z int) (start, end int, ok bool) {
	ends, ok := sec.forward(text, []int{z}, sec.anchorTo)
	if !ok {
		return 0, 0, false
	}
	starts := []int{a}
	for i := sec.anchorFrom - 1; i >= 0; i-- {
		starts = sec.toks[i].back(text, starts, lo)
		if len(starts) == 0 {
			return 0, 0, false
		}
	}
	return slices.Min(starts), ends, true
}

// from matches the whole of sec forward from p.
func (sec *secret) from(text string, p int) (start, end int, ok bool) {
	end, ok = sec.forward(text, []int{p}, 0)
	return p, end, ok
}

// forward matches toks[i:] from the positions at, and returns where the
// match ends: the furthest end, except when the secret ends in
// backslashes (see endOfBackslashes).
func (sec *secret) forward(text string, at []int, i int) (int, bool) {
	before := at
	for ; i < len(sec.toks); i++ {
		if i == len(sec.toks)-sec.trailing {
			before = at
		}
		at = sec.toks[i].step(text, at)
		if len(at) == 0 {
			return 0, false
		}
	}
	if sec.trailing > 0 && len(before) > 0 {
		if e, ok := endOfBackslashes(text, slices.Min(before), sec.trailing); ok && slices.Contains(at, e) {
			return e, true
		}
	}
	return slices.Max(at), true
}

// endOfBackslashes is where a secret's n trailing backslashes end when
// their run starts at q. At JSON depth d each is 2^d units and the next
// character's escape begins with units too (2^d-1 before a quote, 2^(d-1)
// before n or u), so the run is ambiguous; the largest n*2^j units the run
// holds is always whole escapes, and leaves the JSON around the match
// valid. ok is false when the run holds fewer than n units (the backslashes
// were entities).
func endOfBackslashes(text string, q, n int) (int, bool) {
	var ends []int
	for p := q; ; {
		u := unitAt(text, p)
		if u == 0 {
			break
		}
		p += u
		ends = append(ends, p)
	}
	if len(ends) < n {
		return 0, false
	}
	k := n
	for 2*k <= len(ends) {
		k *= 2
	}
	return ends[k-1], true
}

// unitAt is the length of the escape unit (a backslash, or %5C) at
// text[p:], or 0.
func unitAt(text string, p int) int {
	switch {
	case p >= len(text):
		return 0
	case text[p] == '\\':
		return 1
	case text[p] == '%' && p+2 < len(text) && text[p+1] == '5' && (text[p+2] == 'C' || text[p+2] == 'c'):
		return 3
	}
	return 0
}

// unitBefore is the length of the escape unit that ends at text[:p], not
// before lo, or 0.
func unitBefore(text string, p, lo int) int {
	switch {
	case p <= lo:
		return 0
	case text[p-1] == '\\':
		return 1
	case p-3 >= lo && text[p-3] == '%' && text[p-2] == '5' && (text[p-1] == 'C' || text[p-1] == 'c'):
		return 3
	}
	return 0
}

// step is where t ends when it starts at any of at (sorted): sorted,
// distinct. Each run of escape units is walked once: from a later boundary
// of a run already walked, t reaches a subset of what it reached from the
// run's first.
func (t *token) step(text string, at []int) []int {
	var out, run []int
	for _, p := range at {
		if len(run) > 1 && p > run[0] {
			if _, inside := slices.BinarySearch(run, p); inside {
				continue
			}
		}
		switch t.kind {
		case plain:
			if p < len(text) && text[p] == t.b {
				out = append(out, p+1)
			}
		case special, backslash:
			run = walk(text, p, run[:0])
			if t.kind == backslash {
				out = append(out, run[1:]...)
			}
			out = t.formsAfter(text, run, out)
		case space:
			var r []int
			for next := []int{p}; len(next) > 0; {
				var more []int
				for _, q := range next {
					r = walk(text, q, r[:0])
					more = t.formsAfter(text, r, more)
				}
				next = sortUniq(more)
				out = append(out, next...)
			}
		}
	}
	return sortUniq(out)
}

// walk appends p and the end of each escape unit that follows it.
func walk(text string, p int, run []int) []int {
	run = append(run, p)
	for u := unitAt(text, p); u > 0; u = unitAt(text, p) {
		p += u
		run = append(run, p)
	}
	return run
}

// formsAfter adds the ends of t's forms that start after run[0] and the
// units of run: a form of any after none or more, of esc after one at
// least. Only where the run ends can a form start, but for one that
// itself begins like a unit (% of a secret's %).
func (t *token) formsAfter(text string, run []int, out []int) []int {
	from := len(run) - 1
	if t.unitLike {
		from = 0
	}
	for i := from; i < len(run); i++ {
		rest := text[run[i]:]
		for _, f := range t.any {
			if strings.HasPrefix(rest, f) {
				out = append(out, run[i]+len(f))
			}
		}
		if i > 0 {
			for _, f := range t.esc {
				if strings.HasPrefix(rest, f) {
					out = append(out, run[i]+len(f))
				}
			}
		}
	}
	return out
}

// back is where t starts when it ends at any of at (sorted), not before
// lo: sorted, distinct. As in step, each run of units is walked once.
func (t *token) back(text string, at []int, lo int) []int {
	var out, run []int // run: walked back, so descending
	for i := len(at) - 1; i >= 0; i-- {
		p := at[i]
		switch t.kind {
		case plain:
			if p > lo && text[p-1] == t.b {
				out = append(out, p-1)
			}
		case special:
			out = t.before(text, p, lo, out)
		case backslash:
			if len(run) > 1 && p < run[0] && p >= run[len(run)-1] && slices.Contains(run, p) {
				continue
			}
			run = walkBack(text, p, lo, run[:0])
			out = append(out, run[1:]...)
			out = t.before(text, p, lo, out)
		case space:
			for next := []int{p}; len(next) > 0; {
				var more []int
				for _, q := range next {
					more = t.before(text, q, lo, more)
				}
				next = sortUniq(more)
				out = append(out, next...)
			}
		}
	}
	return sortUniq(out)
}

// walkBack appends p and the start of each escape unit before it, not
// before lo.
func walkBack(text string, p, lo int, run []int) []int {
	run = append(run, p)
	for u := unitBefore(text, p, lo); u > 0; u = unitBefore(text, p, lo) {
		p -= u
		run = append(run, p)
	}
	return run
}

// before adds the starts of t's forms that end at p: a form of any, with
// none or more escape units before it; a form of esc, with one at least.
func (t *token) before(text string, p, lo int, out []int) []int {
	head := text[lo:p]
	var run []int
	for _, f := range t.any {
		if strings.HasSuffix(head, f) {
			run = walkBack(text, p-len(f), lo, run[:0])
			out = append(out, run...)
		}
	}
	for _, f := range t.esc {
		if strings.HasSuffix(head, f) {
			run = walkBack(text, p-len(f), lo, run[:0])
			out = append(out, run[1:]...)
		}
	}
	return out
}

func sortUniq(ps []int) []int {
	slices.Sort(ps)
	return slices.Compact(ps)
}
