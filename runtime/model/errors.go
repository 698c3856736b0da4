package model

import "errors"

// ErrPermanent marks a model error that no retry of the same request can
// fix: the provider refused it (HTTP 400, 401, 403, 404, 422, or any error
// the provider said not to retry), the response could not be used (a 2xx
// with no choices or no content, a body that does not decode), or the
// request could not be built (invalid options, an unexpressible request).
// The adapters try such a request once. Match it with errors.Is; the
// error's text is the underlying error's.
//
// An error that does not match ErrPermanent may succeed later: rate limits
// (429), timeouts (408), conflicts (409), server errors (5xx), transport
// errors and attempt timeouts, including when the adapter's own retries
// ran out, and a cancelled context.
var ErrPermanent = errors.New("model: permanent error")

// Permanent wraps err so that it matches ErrPermanent, keeping its text and
// its chain (errors.Is and errors.As still find what err wraps). Permanent
// of nil is nil.
func Permanent(err error) error {
	if err == nil {
		return nil
	}
	return permanentError{err}
}

// IsPermanent reports whether err matches ErrPermanent.
func IsPermanent(err error) bool { return errors.Is(err, ErrPermanent) }

type permanentError struct{ err error }

func (p permanentError) Error() string        { return p.err.Error() }
func (p permanentError) Unwrap() error        { return p.err }
func (p permanentError) Is(target error) bool { return target == ErrPermanent }
