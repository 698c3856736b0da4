// Command node is the Cairn node. `node run` runs one agent task end to end
// on an embedded NATS JetStream server (or an existing NATS with --nats),
// streaming its progress; `node run --resume <run>` continues a run from its
// last commit.
//
//	go run ./cmd/node run examples/agents/researcher.yaml "Is the Great Wall visible from orbit?"
package main

import (
	"fmt"
	"io"
	"os"

	"github.com/cairn-agents/cairn/runtime/jsexec"
)

func main() {
	jsexec.MaybeRunWorker() // this binary is also the JavaScript worker
	os.Exit(dispatch(os.Args[1:], os.Stdout, os.Stderr))
}

func dispatch(args []string, stdout, stderr io.Writer) int {
	if len(args) < 1 {
		usage()
		return 2
	}
	switch args[0] {
	case "run":
		return runCmd(args[1:], stdout, stderr)
	case "serve":
		return serveCmd(args[1:], stderr)
	case "runs":
		return runsCmd(args[1:], stdout, stderr)
	case "agents":
		return agentsCmd(args[1:], stdout, stderr)
	case "replay":
		return replayCmd(args[1:], stdout, stderr)
	case "mcp":
		return mcpCmd(args[1:], os.Stdin, nopCloser{stdout}, stderr)
	case "creds":
		return credsCmd(args[1:], stdout, stderr)
	case "payload-key":
		return payloadKeyCmd(args[1:], stdout, stderr)
	case "help", "-h", "--help":
		usage()
		return 0
	}
	fmt.Fprintf(stderr, "node: unknown command %q\n", args[0])
	usage()
	return 2
}

func usage() {
	fmt.Fprint(os.Stderr, `usage: node <command> [flags]

commands:
  run [flags] AGENT_FILE TASK     run a task with the agent defined in AGENT_FILE (its
                                  directory is the deployment: every agent file in it)
  run --resume RUN AGENT_FILE     continue a run from its last commit
  serve [flags]                   the long-running node with its HTTP API
                                  (--agents DIR --listen ADDR --token T; CAIRN_* env)
  runs ls|show|tail|cancel [RUN]  talk to a serving node (--api URL, CAIRN_TOKEN); tail prints a
                                  run as "node run" does, from its log (--json: the raw events)
  runs start AGENT MESSAGE        start a run on a serving node; retried with an idempotency
                                  key (--key, default random) on refused connections and 5xx
  agents ls                       a serving node's agents: each one's current definition version
                                  and the older ones its runs still use, with counts
  agents show AGENT VERSION       an agent as that version pinned it, and what differs now
  agents upgrade AGENT|--run RUN  move runs in flight to the agent's current version at their next
                                  model boundary (--dry-run: list what would move, write nothing)
  replay [flags] RUN              a run from the log: timeline at --at REV (N, last, last-K),
                                  --json state, --redrive, --fork, --diff REV, --diff-run RUN2
  mcp [flags]                     the node as an MCP server on stdin/stdout (tools: start_run,
                                  get_run, answer, cancel_run; serve also has it at /mcp)
  creds [--data DIR] [--nats-listen HOST:PORT]
                                  how to point natscli at the embedded NATS server: the
                                  read-only reader's credentials (and the node's own)
  payload-key [ID]                a new key entry for a --payload-keys file (seals the log at rest)

run flags:
  --data DIR      JetStream data directory of the embedded server (default .cairn)
  --nats URL      use an existing NATS server instead of the embedded one
  --model SPEC    model for every agent: openai:<model>, anthropic:<model> or scripted:<file>
                  (default: openai or anthropic when OPENAI_API_KEY or ANTHROPIC_API_KEY is set,
                  else each agent file's own model, the offline scripts in examples/)
  --nosync        embedded server without SyncAlways (faster; acknowledged commits can be
                  lost on power failure)
  --group-commit MODE  adaptive (default: one by one while few commits are in flight, atomic
                  batches when many runs commit at once), single (any JetStream server), batch
                  (also on serve and mcp; CAIRN_GROUP_COMMIT)
  --json          print the result as JSON only
  --mcp-servers FILE   MCP servers whose tools are capabilities (also on serve and mcp)
  --payload-keys FILE  AES-256 keys that seal the log's events at rest (also on serve, mcp
                  and replay; CAIRN_PAYLOAD_KEYS; a node payload-key line each, first seals)
`)
}
