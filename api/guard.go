package api

import (
	"fmt"
	"mime"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"unicode/utf8"
)

// Guard refuses cross-site use of the node's HTTP surface (the API, /ui,
// /mcp), in every mode, before any handler runs:
//
//   - Without tokens (loopback only), the Host header must name a loopback
//     host (localhost, 127.0.0.0/8, ::1): a page of another site that
//     rebinds its DNS name to 127.0.0.1 reaches the node with its own name
//     as Host, and is refused (DNS rebinding). With tokens the node may sit
//     behind any name; a page cannot send a bearer token it does not have.
//   - A request that says where it comes from (Origin, Sec-Fetch-Site)
//     must come from the node's own origin, or from no page at all
//     (Sec-Fetch-Site: none, a typed URL). Browsers send these on every
//     cross-site request, scripted or a form's.
//   - A request with a body must say it is JSON (Content-Type
//     application/json): a form, or a script's "simple" request, can only
//     send text/plain, urlencoded or multipart bodies without a preflight.
//
// Unknown routes and methods answer JSON errors (404, 405 with Allow).
// Probes (/healthz, /readyz, /metrics) pass the Host check too: a rebound
// page must not read the metrics either.
func Guard(mux *http.ServeMux, tokens bool) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !tokens && !loopbackHost(r.Host) {
			writeError(w, http.StatusForbidden, "forbidden_host", "Host %q is not a loopback name: a node without tokens answers only requests addressed to localhost, 127.0.0.1 or [::1]", r.Host)
			return
		}
		if why := crossSite(r); why != "" {
			writeError(w, http.StatusForbidden, "cross_site", "%s: the node refuses requests from other sites' pages", why)
			return
		}
		if hasBody(r) && !jsonBody(r) {
			writeError(w, http.StatusUnsupportedMediaType, "unsupported_media_type", "Content-Type %q: the body must be application/json", r.Header.Get("Content-Type"))
			return
		}
		if _, pattern := mux.Handler(r); pattern == "" {
			if allow := allowed(mux, r); len(allow) > 0 {
				w.Header().Set("Allow", strings.Join(allow, ", "))
				writeError(w, http.StatusMethodNotAllowed, "method_not_allowed", "%s %s: allowed: %s", r.Method, r.URL.Path, strings.Join(allow, ", "))
				return
			}
			writeError(w, http.StatusNotFound, "not_found", "no route %s %s", r.Method, r.URL.Path)
			return
		}
		mux.ServeHTTP(w, r)
	})
}

// loopbackHost reports whether a Host header names a loopback host.
func loopbackHost(hostport string) bool {
	host := hostport
	if h, _, err := net.SplitHostPort(hostport); err == nil {
		host = h
	}
	host = strings.TrimSuffix(strings.TrimPrefix(host, "["), "]")
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// crossSite says why a request comes from another site's page, or "".
func crossSite(r *http.Request) string {
	switch site := r.Header.Get("Sec-Fetch-Site"); site {
	case "", "same-origin", "none":
	default:
		return "Sec-Fetch-Site " + site
	}
	origin := r.Header.Get("Origin")
	if origin == "" {
		return ""
	}
	u, err := url.Parse(origin)
	if err != nil || origin == "null" || u.Host == "" || !strings.EqualFold(u.Host, r.Host) {
		return "Origin " + origin + " is not this node's (" + r.Host + ")"
	}
	return ""
}

// hasBody reports whether the request carries a body.
func hasBody(r *http.Request) bool {
	return r.ContentLength > 0 || r.ContentLength < 0 && r.Body != nil && r.Body != http.NoBody
}

// jsonBody reports whether the request's Content-Type is JSON.
func jsonBody(r *http.Request) bool {
	mt, _, err := mime.ParseMediaType(r.Header.Get("Content-Type"))
	return err == nil && (mt == "application/json" || strings.HasSuffix(mt, "+json"))
}

// allowed lists the methods mux routes for r's path.
func allowed(mux *http.ServeMux, r *http.Request) []string {
	var out []string
	for _, m := range []string{http.MethodGet, http.MethodPost, http.MethodPut, http.MethodPatch, http.MethodDelete} {
		probe := r.Clone(r.Context())
		probe.Method = m
		if _, pattern := mux.Handler(probe); pattern != "" && !slices.Contains(out, m) {
			out = append(out, m)
		}
	}
	return out
}

// checkJSONText refuses a JSON text that is not valid UTF-8 or that holds
// a \u escape of a lone UTF-16 surrogate: encoding/json replaces both with
// U+FFFD without a word, and a run would start with a message its sender
// did not write.
func checkJSONText(b []byte) error {
	if !utf8.Valid(b) {
		i := 0
		for i < len(b) {
			r, n := utf8.DecodeRune(b[i:])
			if r == utf8.RuneError && n <= 1 {
				break
			}
			i += n
		}
		return fmt.Errorf("invalid UTF-8 at byte %d", i)
	}
	inString := false
	for i := 0; i < len(b); i++ {
		switch c := b[i]; {
		case c == '"':
			inString = !inString
		case c == '\\' && inString:
			if i+1 < len(b) && b[i+1] == 'u' {
				hi, ok := hex4(b, i+2)
				switch {
				case ok && hi >= 0xD800 && hi <= 0xDBFF:
					lo, ok2 := uint16(0), false
					if i+7 < len(b) && b[i+6] == '\\' && b[i+7] == 'u' {
						lo, ok2 = hex4(b, i+8)
					}
					if !ok2 || lo < 0xDC00 || lo > 0xDFFF {
						return fmt.Errorf("a lone UTF-16 surrogate \\u%04x at byte %d", hi, i)
					}
					i += 11 // both escapes
					continue
				case ok && hi >= 0xDC00 && hi <= 0xDFFF:
					return fmt.Errorf("a lone UTF-16 surrogate \\u%04x at byte %d", hi, i)
				}
			}
			i++ // the escaped character
		}
	}
	return nil
}

// hex4 reads four hex digits at b[i:].
func hex4(b []byte, i int) (uint16, bool) {
	if i+4 > len(b) {
		return 0, false
	}
	var v uint16
	for _, c := range b[i : i+4] {
		var d byte
		switch {
		case c >= '0' && c <= '9':
			d = c - '0'
		case c >= 'a' && c <= 'f':
			d = c - 'a' + 10
		case c >= 'A' && c <= 'F':
			d = c - 'A' + 10
		default:
			return 0, false
		}
		v = v<<4 | uint16(d)
	}
	return v, true
}
