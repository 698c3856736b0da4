package actors

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/cairn-agents/cairn/runtime"
)

// A controller operation that meets another run's conflict, lost lease or
// busy session stops the attempt (a fatal tool error) without reading as
// this run's own fencing, which would stop its actor for good instead of
// retrying. Other errors keep their chain; rejections and waits pass.
func TestClassifyHidesOtherRunsFencing(t *testing.T) {
	for _, sentinel := range []error{runtime.ErrConflict, runtime.ErrLeaseLost, runtime.ErrSessionBusy} {
		err := fmt.Errorf("actors: create child run: %w", sentinel)
		classify(&err)
		var f runtime.FatalToolError
		if !errors.As(err, &f) || errors.Is(err, sentinel) || !strings.Contains(err.Error(), sentinel.Error()) {
			t.Fatalf("%v: classified as %v (fatal %v, still %v: %v)", sentinel, err, errors.As(err, &f), sentinel, errors.Is(err, sentinel))
		}
	}
	io := errors.New("nats: timeout")
	err := fmt.Errorf("actors: read: %w", io)
	if classify(&err); !errors.Is(err, io) {
		t.Fatalf("an I/O error lost its chain: %v", err)
	}
	err = reject("no such call")
	if classify(&err); !errors.As(err, new(rejection)) {
		t.Fatalf("a rejection became %v", err)
	}
	err = fmt.Errorf("parked: %w", runtime.ErrWaiting)
	if classify(&err); !errors.Is(err, runtime.ErrWaiting) || errors.As(err, new(runtime.FatalToolError)) {
		t.Fatalf("a wait became %v", err)
	}
}
