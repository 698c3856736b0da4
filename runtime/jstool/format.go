package jstool

import (
	"encoding/json"
	"fmt"
	"strings"
)

// Result is a formatted tool result.
type Result struct {
	Content string
	IsError bool
}

// resultBody is the JSON the model reads for a completed script.
type resultBody struct {
	Result      json.RawMessage `json:"result"`
	Logs        []LogLine       `json:"logs,omitempty"`
	LogsDropped int             `json:"logs_dropped,omitempty"`
}

// Format turns an outcome and its callbacks into the tool result. A failed
// script lists the callbacks that completed and warns against repeating the
// whole script (C22).
func Format(o Outcome, callbacks []Callback) Result {
	if o.Failure == nil {
		v := o.Value
		if len(v) == 0 || !json.Valid(v) {
			v = json.RawMessage("null")
		}
		b, err := json.Marshal(resultBody{Result: v, Logs: o.Logs, LogsDropped: o.LogsDropped})
		if err != nil {
			return Result{Content: "run_js: result could not be encoded: " + err.Error(), IsError: true}
		}
		return Result{Content: string(b)}
	}
	return Result{Content: FailureText(o.Failure.Kind, o.Failure.Message, callbacks, o.Logs), IsError: true}
}

// FailureText is the tool error for a script that did not complete.
func FailureText(kind, msg string, callbacks []Callback, logs []LogLine) string {
	var b strings.Builder
	fmt.Fprintf(&b, "run_js failed (%s): %s", kind, msg)
	done := 0
	for _, c := range callbacks {
		if c.Outcome == "ok" {
			done++
		}
	}
	if done > 0 {
		fmt.Fprintf(&b, "\nThese capability calls COMPLETED before the failure and their effects stand:")
		for _, c := range callbacks {
			if c.Outcome == "ok" {
				fmt.Fprintf(&b, "\n- #%d caps.%s (args digest %s)", c.Seq, c.Capability, c.ArgsDigest)
			}
		}
		b.WriteString("\nDo not rerun the whole script: repeat only what did not complete.")
	} else {
		b.WriteString("\nNo capability call completed.")
	}
	for _, c := range callbacks {
		if c.Outcome != "ok" {
			fmt.Fprintf(&b, "\n- #%d caps.%s %s: %s", c.Seq, c.Capability, c.Outcome, c.Error)
		}
	}
	if len(logs) > 0 {
		b.WriteString("\nConsole:")
		for _, l := range logs {
			fmt.Fprintf(&b, "\n[%s] %s", l.Level, l.Text)
		}
	}
	return b.String()
}
