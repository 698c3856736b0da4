package main

import (
	"bufio"
	"bytes"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"syscall"
	"testing"

	"github.com/cairn-agents/cairn/internal/leakcheck"
	"github.com/cairn-agents/cairn/runtime/jsexec"
)

func TestMain(m *testing.M) {
	jsexec.MaybeRunWorker()
	if os.Getenv(plantedMCPEnv) != "" {
		// This test binary plays an MCP server (planted_test.go).
		plantedMCPServer()
		os.Exit(0)
	}
	if args := os.Getenv("CAIRN_NODE_ARGS"); args != "" {
		// This test binary plays the node in a subprocess.
		os.Exit(dispatch(strings.Split(args, "\x1f"), os.Stdout, os.Stderr))
	}
	// A goroutine of Cairn's own (or a NATS connection or server) that
	// outlives the tests fails them (internal/leakcheck: goleak counts
	// protoactor-go's own, which it leaves behind).
	leakcheck.Main(m)
}

const example = "../../examples/agents/researcher.yaml"

// The README's first command, as a subprocess: offline, end to end, twice
// on the same data directory (the second run reuses the stream and the
// buckets).
func TestReadmeCommand(t *testing.T) {
	dir := t.TempDir()
	for i := 0; i < 2; i++ {
		var out, errb bytes.Buffer
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), "CAIRN_NODE_ARGS="+strings.Join([]string{"run", "--data", dir, example, "Is the Great Wall visible from orbit?"}, "\x1f"))
		cmd.Stdout, cmd.Stderr = &out, &errb
		if err := cmd.Run(); err != nil {
			t.Fatalf("run %d: %v\n%s\n%s", i, err, out.String(), errb.String())
		}
		for _, want := range []string{"-> spawn_fact_checker", "-> spawn_summarizer", "parked", "fact-checker  == completed",
			"summarizer    == completed", "researcher    == completed", `"verdict": "refuted"`, "== totals: 7 model steps"} {
			if !strings.Contains(out.String(), want) {
				t.Fatalf("run %d: output lacks %q:\n%s", i, want, out.String())
			}
		}
	}
}

// Ctrl-C in the middle of a run, then --resume: the run finishes from its
// last commit.
func TestInterruptAndResume(t *testing.T) {
	dir := t.TempDir()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), "CAIRN_NODE_ARGS="+strings.Join([]string{"run", "--data", dir, example, "Is the Great Wall visible from orbit?"}, "\x1f"))
	stdout, _ := cmd.StdoutPipe()
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	runID := ""
	sc := bufio.NewScanner(stdout)
	re := regexp.MustCompile(`^run (\S+) of researcher started`)
	for sc.Scan() {
		if m := re.FindStringSubmatch(sc.Text()); m != nil {
			runID = m[1]
		}
		if strings.Contains(sc.Text(), "-> spawn_summarizer") {
			break // children are being started: interrupt now
		}
	}
	_ = cmd.Process.Signal(syscall.SIGINT)
	go func() {
		for sc.Scan() {
		}
	}()
	err := cmd.Wait()
	if runID == "" {
		t.Fatalf("no run ID printed; stderr:\n%s", stderr.String())
	}
	if ee, ok := err.(*exec.ExitError); ok && ee.ExitCode() != 130 {
		t.Fatalf("interrupted node exited %d:\n%s", ee.ExitCode(), stderr.String())
	}
	var out, errb bytes.Buffer
	if code := runCmd([]string{"--data", dir, "--resume", runID, example}, &out, &errb); code != 0 {
		t.Fatalf("resume: exit %d\n%s\n%s", code, out.String(), errb.String())
	}
	if !strings.Contains(out.String(), "resuming run "+runID) || !strings.Contains(out.String(), `"verdict": "refuted"`) {
		t.Fatalf("resume output:\n%s", out.String())
	}
}

// A bad definition is a clear error naming the file and the field, before
// anything starts.
func TestBadDefinitionNamesFileAndField(t *testing.T) {
	dir := t.TempDir()
	write := func(name, body string) {
		if err := os.WriteFile(dir+"/"+name, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("a.yaml", "slug: a\ninstructions: x\nmodel: scripted:a.script.yaml\nlimits: {context_tokens: 1000, output_tokens: 100}\noutput_schema: {type: object, properties: {x: {minLenght: 3}}}\n")
	_, err := loadDeployment(dir)
	if err == nil || !strings.Contains(err.Error(), "a.yaml: output_schema:") || !strings.Contains(err.Error(), "minLenght") {
		t.Fatalf("err = %v", err)
	}
	write("a.yaml", "slug: a\ninstructions: x\nlimits: {context_tokens: 1000, output_tokens: 100}\noutput_schema: {type: object}\nsubagents: [ghost]\n")
	if _, err := loadDeployment(dir); err == nil || !strings.Contains(err.Error(), "a.yaml: subagents[0]: no agent \"ghost\"") {
		t.Fatalf("err = %v", err)
	}
	write("a.yaml", "slug: a\ninstrucions: x\n")
	if _, err := loadDeployment(dir); err == nil || !strings.Contains(err.Error(), "a.yaml") || !strings.Contains(err.Error(), "instrucions") {
		t.Fatalf("err = %v", err)
	}
}
