package actors

import (
	"errors"
	"fmt"
	"strings"
	"unicode/utf8"

	"github.com/cairn-agents/cairn/runtime/schema"
)

// MaxMessageBytes is the largest message a run starts with, or a
// continuation carries. The message is stored inline in the run's record,
// one NATS message (1 MiB by default, with the record's envelope and the
// JSON escaping of the text); above this bound the write could fail after
// admission with an error the caller could do nothing about.
const MaxMessageBytes = 256 << 10

// ErrTooLarge is the answer to a message above MaxMessageBytes.
var ErrTooLarge = errors.New("actors: too large")

// checkMessage refuses, before anything is written, a message a run
// cannot start with: empty, not UTF-8, above MaxMessageBytes, or, for an
// agent with an input schema (a subagent started by the API), not JSON
// valid against that schema, as its parent's spawn would have to be.
func checkMessage(a *Agent, input *schema.Schema, message string) error {
	switch {
	case strings.TrimSpace(message) == "":
		return fmt.Errorf("%w: message: empty; a run needs a nonempty message", ErrInvalid)
	case len(message) > MaxMessageBytes:
		return fmt.Errorf("%w: message: %d bytes, over the limit of %d", ErrTooLarge, len(message), MaxMessageBytes)
	case !utf8.ValidString(message):
		return fmt.Errorf("%w: message: not valid UTF-8", ErrInvalid)
	case input != nil:
		if err := input.Validate([]byte(message)); err != nil {
			return fmt.Errorf("%w: message: agent %q takes JSON input valid against its input_schema: %v", ErrInvalid, a.Definition.Slug, err)
		}
	}
	return nil
}
