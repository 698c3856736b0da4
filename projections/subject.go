package projections

import "github.com/cairn-agents/cairn/events"

// matchAny reports whether subject matches any of filters.
func matchAny(filters []string, subject string) bool {
	for _, f := range filters {
		if events.SubjectMatches(f, subject) {
			return true
		}
	}
	return false
}
