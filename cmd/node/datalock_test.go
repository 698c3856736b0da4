package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
)

// One server per data directory: while a node serves from a directory,
// `node run` and `node replay` on it are refused, naming the process that
// holds it, before they write anything; before this they started a second
// embedded server on the same store files.
func TestDataDirectoryInUseIsRefused(t *testing.T) {
	dir := t.TempDir()
	a, err := startApp(context.Background(), nodeOptions{agentsDir: "../../examples/agents", data: dir})
	if err != nil {
		t.Fatal(err)
	}
	defer a.close(context.Background())
	want := fmt.Sprintf("is in use by process %d", os.Getpid())
	for _, args := range [][]string{
		{"run", "--data", dir, example, "Is the Great Wall visible from orbit?"},
		{"replay", "--data", dir, "r0123456789abcdef0123"},
	} {
		var out, errb bytes.Buffer
		if code := dispatch(args, &out, &errb); code == 0 || !strings.Contains(errb.String(), want) {
			t.Errorf("%v beside a serving node: exit %d, stderr %q; want a refusal with %q", args[:1], code, errb.String(), want)
		}
	}
}
