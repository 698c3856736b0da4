package projections

import (
	"encoding/base64"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/cairn-agents/cairn/runtime"
)

// RunQuery selects runs of the index, newest first (by creation, then run
// ID). Every field that is set narrows the selection.
type RunQuery struct {
	// Owner: only this principal's runs ("" for every owner's).
	Owner string
	// Statuses: runs in any of these (none: every status).
	Statuses []runtime.CallStatus
	// Agent: runs of this agent.
	Agent string
	// Parent: the children of this run (implies Children).
	Parent string
	// Children: children as well as roots (roots only otherwise).
	Children bool
	// Since and Until: runs created at or after Since, and before Until.
	Since, Until time.Time
	// Q: runs whose run or session ID starts with Q.
	Q string
	// Cursor: the page after the one whose Next it is ("" for the first).
	Cursor string
	// Limit: the most runs on a page (zero: DefaultRunLimit).
	Limit int
}

// Bounds of a page of runs.
const (
	DefaultRunLimit = 100
	MaxRunLimit     = 1000
)

// RunStatuses are the statuses a run shows in the index, in the order a
// listing offers them. A run is waiting while its latest commit dispatches
// wait_calls (parked on its children, or a deadline), running otherwise
// until it ends.
var RunStatuses = []runtime.CallStatus{runtime.StatusRunning, runtime.StatusWaiting, runtime.StatusNeedsInput,
	runtime.StatusCompleted, runtime.StatusFailed, runtime.StatusCancelled, runtime.StatusPurged}

// RunPage is one page of a query.
type RunPage struct {
	Runs []RunEntry `json:"runs"`
	// Next is the cursor of the next page; "" on the last.
	Next string `json:"next_cursor,omitempty"`
}

// ErrBadQuery is matched by the errors of a query that cannot be run; each
// names the field and the reason.
var ErrBadQuery = errors.New("projections: bad run query")

type queryError struct{ field, reason string }

func (e *queryError) Error() string        { return e.field + ": " + e.reason }
func (e *queryError) Is(target error) bool { return target == ErrBadQuery }

// Validate checks q, naming the first field that is wrong.
func (q RunQuery) Validate() error {
	for _, s := range q.Statuses {
		if !slices.Contains(RunStatuses, s) {
			return &queryError{"status", fmt.Sprintf("%q is not a status: want %s", s, statusList())}
		}
	}
	if q.Limit < 0 || q.Limit > MaxRunLimit {
		return &queryError{"limit", fmt.Sprintf("%d: want 1 to %d", q.Limit, MaxRunLimit)}
	}
	if !q.Since.IsZero() && !q.Until.IsZero() && !q.Since.Before(q.Until) {
		return &queryError{"until", "not after since"}
	}
	if _, _, err := parseCursor(q.Cursor); err != nil {
		return err
	}
	return nil
}

func statusList() string {
	s := make([]string, len(RunStatuses))
	for i, st := range RunStatuses {
		s[i] = string(st)
	}
	return strings.Join(s, ", ")
}

// Query returns a page of the runs q selects. The index is in memory: a
// query reads it, never the log.
func (ix *Runs) Query(q RunQuery) (RunPage, error) {
	if err := q.Validate(); err != nil {
		return RunPage{}, err
	}
	limit := q.Limit
	if limit == 0 {
		limit = DefaultRunLimit
	}
	afterAt, afterID, _ := parseCursor(q.Cursor)
	ix.mu.RLock()
	out := []RunEntry{}
	for _, e := range ix.runs {
		if q.matches(e) && (q.Cursor == "" || older(e, afterAt, afterID)) {
			out = append(out, *e)
		}
	}
	ix.mu.RUnlock()
	slices.SortFunc(out, func(a, b RunEntry) int {
		if c := b.Created.Compare(a.Created); c != 0 {
			return c
		}
		return strings.Compare(a.RunID, b.RunID)
	})
	page := RunPage{Runs: out}
	if len(out) > limit {
		page.Runs = out[:limit:limit]
		last := page.Runs[limit-1]
		page.Next = cursorOf(last)
	}
	return page, nil
}

func (q RunQuery) matches(e *RunEntry) bool {
	switch {
	case q.Owner != "" && e.Owner != q.Owner,
		len(q.Statuses) > 0 && !slices.Contains(q.Statuses, e.Status),
		q.Agent != "" && e.Agent != q.Agent,
		q.Parent != "" && e.ParentRunID != q.Parent,
		q.Parent == "" && !q.Children && e.ParentRunID != "",
		!q.Since.IsZero() && e.Created.Before(q.Since),
		!q.Until.IsZero() && !e.Created.Before(q.Until),
		q.Q != "" && !strings.HasPrefix(e.RunID, q.Q) && !strings.HasPrefix(e.SessionID, q.Q):
		return false
	}
	return true
}

// older reports whether e comes after (created, runID) in the listing's
// order: created earlier, or at the same time with a greater run ID.
func older(e *RunEntry, created time.Time, runID string) bool {
	if c := e.Created.Compare(created); c != 0 {
		return c < 0
	}
	return e.RunID > runID
}

// A cursor is the position of a page's last run: its creation time and
// run ID, opaque to the caller.
func cursorOf(e RunEntry) string {
	return base64.RawURLEncoding.EncodeToString([]byte(strconv.FormatInt(e.Created.UnixNano(), 10) + "." + e.RunID))
}

func parseCursor(c string) (time.Time, string, error) {
	if c == "" {
		return time.Time{}, "", nil
	}
	bad := &queryError{"cursor", "not a cursor this index gave"}
	b, err := base64.RawURLEncoding.DecodeString(c)
	if err != nil {
		return time.Time{}, "", bad
	}
	ns, id, ok := strings.Cut(string(b), ".")
	n, err := strconv.ParseInt(ns, 10, 64)
	if !ok || err != nil || id == "" {
		return time.Time{}, "", bad
	}
	return time.Unix(0, n), id, nil
}
