package model

import (
	"errors"
	"fmt"
	"testing"
)

func TestPermanent(t *testing.T) {
	if Permanent(nil) != nil {
		t.Fatal("Permanent(nil) != nil")
	}
	base := errors.New("provider: HTTP 401")
	err := fmt.Errorf("outer: %w", Permanent(base))
	if !errors.Is(err, ErrPermanent) || !IsPermanent(err) || !errors.Is(err, base) {
		t.Fatalf("%v does not match ErrPermanent and its cause", err)
	}
	if err.Error() != "outer: provider: HTTP 401" {
		t.Fatalf("text %q", err)
	}
	if IsPermanent(base) || IsPermanent(nil) || IsPermanent(errors.Join(base)) {
		t.Fatal("an unmarked error is permanent")
	}
	if !IsPermanent(errors.Join(errors.New("x"), err)) {
		t.Fatal("a joined permanent error is not permanent")
	}
}
