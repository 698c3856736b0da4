package lifecycle

import (
	"fmt"
	"strings"
	"time"
)

// String forms of events and effects, as the scripts (testdata/*.txt) and
// the state diagram write them.

func (e Woken) String() string         { return "woken " + e.Reason.String() }
func (RetryFired) String() string      { return "retry-fired" }
func (CancelRequested) String() string { return "cancel" }
func (MovedAway) String() string       { return "moved-away" }
func (Drain) String() string           { return "drain" }
func (IdleTimeout) String() string     { return "idle-timeout" }
func (EndWritten) String() string      { return "end-written" }

func (e AttemptEnded) String() string {
	var b strings.Builder
	b.WriteString("attempt-ended " + e.Outcome.String())
	if e.Reused {
		b.WriteString(" reused")
	}
	if e.Keepable {
		b.WriteString(" keepable")
	}
	if e.WaitCallID != "" {
		b.WriteString(" wait=" + e.WaitCallID)
	}
	if e.Err != "" {
		fmt.Fprintf(&b, " err=%q", e.Err)
	}
	return b.String()
}

func (e StartAttempt) String() string {
	if e.Reuse {
		return "start-attempt " + e.Reason.String() + " reuse"
	}
	return "start-attempt " + e.Reason.String()
}
func (CancelAttempt) String() string { return "cancel-attempt" }
func (DisarmRetry) String() string   { return "disarm-retry" }
func (e ArmDeadline) String() string {
	if e.WaitCallID == "" {
		return "arm-deadline"
	}
	return "arm-deadline wait=" + e.WaitCallID
}
func (KeepHandle) String() string { return "keep-handle" }
func (DropHandle) String() string { return "drop-handle" }
func (e WriteEnd) String() string { return fmt.Sprintf("write-end %q", e.Reason) }
func (e HandOver) String() string { return "hand-over " + e.Reason.String() }
func (Passivate) String() string  { return "passivate" }
func (RearmIdle) String() string  { return "rearm-idle" }

// ArmRetry's time is printed relative to epoch by FormatEffects: scripts
// run on a clock of their own.
func (e ArmRetry) String() string { return "arm-retry at=" + e.At.UTC().Format(time.RFC3339Nano) }

// FormatEffects writes effects one per line; ArmRetry's time as an offset
// from epoch (the scripts' clock starts there).
func FormatEffects(epoch time.Time, effs []Effect) string {
	var b strings.Builder
	for _, e := range effs {
		if a, ok := e.(ArmRetry); ok {
			fmt.Fprintf(&b, "arm-retry after=%s\n", a.At.Sub(epoch))
			continue
		}
		fmt.Fprintf(&b, "%v\n", e)
	}
	return b.String()
}

// EffectName is an effect's kind alone, without its arguments.
func EffectName(e Effect) string {
	s := fmt.Sprint(e)
	name, _, _ := strings.Cut(s, " ")
	return name
}
