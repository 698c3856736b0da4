package schema

// HasQuick reports whether s has a quick check, for the external tests.
func HasQuick(s *Schema) bool { return s.c.quick != nil }
