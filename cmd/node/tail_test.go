package main

import (
	"bytes"
	"net/http"
	"regexp"
	"strings"
	"testing"
)

// `runs tail` prints the lines `node run` prints, read back from the log:
// the researcher's lines of a `node run` are its lines in `runs tail` of the
// same task on a node, but the park (no commit; the wait call before it is
// there). Before, tail printed only each event's type.
func TestRunsTailPrintsWhatNodeRunPrints(t *testing.T) {
	var out, errb bytes.Buffer
	if code := runCmd([]string{"--data", t.TempDir(), example, "Is the Great Wall visible from orbit?"}, &out, &errb); code != 0 {
		t.Fatalf("run: exit %d\n%s\n%s", code, out.String(), errb.String())
	}
	var want []string
	for _, l := range strings.Split(out.String(), "\n") {
		if strings.HasPrefix(l, "researcher ") && !strings.Contains(l, ".. parked") {
			want = append(want, l)
		}
	}
	base := serving(t, t.TempDir())
	status, _, started := post(t, base, nil, `{"agent":"researcher","message":"Is the Great Wall visible from orbit?"}`)
	if status != 201 {
		t.Fatalf("POST: %d %v", status, started)
	}
	var tail bytes.Buffer
	c := &client{base: base, token: "alice-token", http: http.DefaultClient}
	if err := c.tail(started["run_id"].(string), &tail, false); err != nil {
		t.Fatal(err)
	}
	// The children's IDs are new in each run.
	ids := regexp.MustCompile(`"(run_id|session_id)":"[^"]+"`)
	got := ids.ReplaceAllString(strings.TrimSpace(tail.String()), `"$1":"-"`)
	w := ids.ReplaceAllString(strings.Join(want, "\n"), `"$1":"-"`)
	if len(want) < 5 || got != w {
		t.Fatalf("runs tail:\n%s\nnode run (the researcher's lines):\n%s", got, w)
	}
}
