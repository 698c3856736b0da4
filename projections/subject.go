package projections

import "strings"

// matchSubject reports whether a NATS subject matches filter ('*' is one
// token, a final '>' one or more).
func matchSubject(filter, subject string) bool {
	for {
		ft, frest, fmore := strings.Cut(filter, ".")
		if ft == ">" {
			return subject != ""
		}
		st, srest, smore := strings.Cut(subject, ".")
		if ft != "*" && ft != st {
			return false
		}
		if !fmore || !smore {
			return fmore == smore
		}
		filter, subject = frest, srest
	}
}

// matchAny reports whether subject matches any of filters.
func matchAny(filters []string, subject string) bool {
	for _, f := range filters {
		if matchSubject(f, subject) {
			return true
		}
	}
	return false
}
