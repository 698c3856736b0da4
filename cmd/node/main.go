// Command node is the Cairn node. `node run` runs one agent task end to end
// on an embedded NATS JetStream server (or an existing NATS with --nats),
// streaming its progress; `node run --resume <run>` continues a run from its
// last commit.
//
//	go run ./cmd/node run examples/agents/researcher.yaml "Is the Great Wall visible from orbit?"
package main

import (
	"fmt"
	"os"

	"github.com/cairn-agents/cairn/runtime/jsexec"
)

func main() {
	jsexec.MaybeRunWorker() // this binary is also the JavaScript worker
	if len(os.Args) < 2 {
		usage()
		os.Exit(2)
	}
	switch os.Args[1] {
	case "run":
		os.Exit(runCmd(os.Args[2:], os.Stdout, os.Stderr))
	case "help", "-h", "--help":
		usage()
	default:
		fmt.Fprintf(os.Stderr, "node: unknown command %q\n", os.Args[1])
		usage()
		os.Exit(2)
	}
}

func usage() {
	fmt.Fprint(os.Stderr, `usage: node <command> [flags]

commands:
  run [flags] AGENT_FILE TASK     run a task with the agent defined in AGENT_FILE (its
                                  directory is the deployment: every agent file in it)
  run --resume RUN AGENT_FILE     continue a run from its last commit

run flags:
  --data DIR      JetStream data directory of the embedded server (default .cairn)
  --nats URL      use an existing NATS server instead of the embedded one
  --model SPEC    model for every agent: openai:<model>, anthropic:<model> or scripted:<file>
                  (default: openai or anthropic when OPENAI_API_KEY or ANTHROPIC_API_KEY is set,
                  else each agent file's own model, the offline scripts in examples/)
  --nosync        embedded server without SyncAlways (faster; acknowledged commits can be
                  lost on power failure)
  --json          print the result as JSON only
`)
}
