package schema

import (
	"cmp"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// ErrGate matches every error Compile and CompletionSchema return: the schema
// was refused before any model work.
var ErrGate = errors.New("schema: rejected by the gate")

// ErrInvalid matches every error Validate returns: the instance does not
// satisfy the schema, or is not JSON.
var ErrInvalid = errors.New("schema: instance is invalid")

// GateError says why the gate refused a schema. Pointer is the JSON pointer
// (RFC 6901, "" for the root) of the schema object holding the keyword at
// fault, or of the value that is not a schema, or of the place where the
// JSON is malformed. Keyword is the keyword at fault, or the applicator that
// holds a value that is not a schema; it is empty when no keyword is
// involved (malformed JSON, a root that is not a schema).
type GateError struct {
	Pointer, Keyword, Reason string

	internal bool // a recovered panic, not a verdict on the schema
}

// Error renders "schema: <pointer>: <keyword>: <reason>", the root pointer as
// "(root)" and without the keyword part when Keyword is empty.
func (e *GateError) Error() string {
	if e.Keyword == "" {
		return fmt.Sprintf("schema: %s: %s", renderPointer(e.Pointer), e.Reason)
	}
	return fmt.Sprintf("schema: %s: %s: %s", renderPointer(e.Pointer), e.Keyword, e.Reason)
}

// Is reports whether target is ErrGate.
func (e *GateError) Is(target error) bool { return target == ErrGate }

// Issue is one reason an instance is invalid. InstancePointer locates the
// offending value in the instance and SchemaPointer the keyword (or the
// false schema) that refused it, both RFC 6901 JSON pointers with "" for the
// root; SchemaPointer is the keyword's real place, behind any $ref. Keyword
// is the keyword, or "false" for a false schema. Instance-level problems
// (malformed JSON, a number out of range) have an empty SchemaPointer and
// Keyword.
type Issue struct {
	InstancePointer, SchemaPointer, Keyword, Message string
}

// ValidationError lists every issue found in an invalid instance, sorted by
// InstancePointer, then SchemaPointer, then Keyword (then Message).
type ValidationError struct {
	Issues []Issue
}

// maxShownIssues caps the issues Error renders; the rest are counted.
const maxShownIssues = 20

// Error renders the issues one per line, for the model to read and fix its
// call:
//
//	schema: instance is invalid:
//	/a/b: minLength: string is shorter than 3 characters (schema /properties/a/properties/b/minLength)
//	and 4 more
func (e *ValidationError) Error() string {
	var b strings.Builder
	b.WriteString(ErrInvalid.Error())
	b.WriteString(":")
	for i, is := range e.Issues {
		if i == maxShownIssues {
			fmt.Fprintf(&b, "\nand %d more", len(e.Issues)-maxShownIssues)
			break
		}
		b.WriteString("\n")
		b.WriteString(renderPointer(is.InstancePointer))
		b.WriteString(": ")
		if is.Keyword != "" {
			b.WriteString(is.Keyword)
			b.WriteString(": ")
		}
		b.WriteString(is.Message)
		if is.SchemaPointer != "" || is.Keyword != "" {
			b.WriteString(" (schema ")
			b.WriteString(renderPointer(is.SchemaPointer))
			b.WriteString(")")
		}
	}
	return b.String()
}

// Is reports whether target is ErrInvalid.
func (e *ValidationError) Is(target error) bool { return target == ErrInvalid }

// sortIssues sorts and removes duplicates (the same keyword reached twice,
// through two references to one definition).
func sortIssues(issues []Issue) []Issue {
	slices.SortFunc(issues, func(a, b Issue) int {
		return cmp.Or(
			cmp.Compare(a.InstancePointer, b.InstancePointer),
			cmp.Compare(a.SchemaPointer, b.SchemaPointer),
			cmp.Compare(a.Keyword, b.Keyword),
			cmp.Compare(a.Message, b.Message),
		)
	})
	return slices.Compact(issues)
}

// renderPointer shows a pointer in a message: the root as "(root)", a
// pointer holding control characters quoted, so every issue stays one line,
// and a very long one clipped.
func renderPointer(p string) string {
	if p == "" {
		return "(root)"
	}
	for _, r := range p {
		if r < 0x20 || r == 0x7f || r == '\u2028' || r == '\u2029' {
			return clip(strconv.Quote(p), 200)
		}
	}
	return clip(p, 200)
}
