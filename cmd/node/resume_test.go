package main

import "testing"

// The resume hint names the command actually run: `go run ./cmd/node` only
// for a binary go run built, the program as invoked otherwise (it said
// `go run ./cmd/node` for a built binary too), with arguments quoted for a
// shell.
func TestCommandLine(t *testing.T) {
	for _, tc := range []struct {
		argv0 string
		args  []string
		want  string
	}{
		{"/tmp/go-build3525/b001/exe/node", []string{"run", "--resume", "r1", "a.yaml"}, "go run ./cmd/node run --resume r1 a.yaml"},
		{"./node", []string{"run", "--data", ".cairn", "a.yaml"}, "./node run --data .cairn a.yaml"},
		{"/usr/local/bin/cairn-node", []string{"run", "--data", "my data", "--model=openai:gpt-4o"}, "/usr/local/bin/cairn-node run --data 'my data' --model=openai:gpt-4o"},
		{"/opt/it's/node", []string{"run", "$HOME", ""}, `'/opt/it'\''s/node' run '$HOME' ''`},
		{"/tmp/go-build3525/b001/exe/other", []string{"run"}, "/tmp/go-build3525/b001/exe/other run"},
	} {
		if got := commandLine(tc.argv0, tc.args); got != tc.want {
			t.Errorf("commandLine(%q, %q) = %s; want %s", tc.argv0, tc.args, got, tc.want)
		}
	}
}
