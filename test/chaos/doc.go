// Package chaos breaks Cairn nodes the way a harsh operator would, on a
// schedule derived from one seed, and audits the run log afterwards for
// safety (no revision twice, no commit under a superseded lease, no run_js
// dispatched twice, a budget kept in the log that stays there, never
// decreases, charges every response's tokens and, with its side entry in
// the budgets bucket, counts a step for every response) and for liveness (every
// admitted run reaches exactly one end, none failed, none left running).
//
// The package holds the two pure cores of that harness, so each can be
// tested on its own:
//
//   - Plan turns a seed into a fault schedule for a topology: which fault,
//     on which process, after how long, held for how long. The same seed
//     gives the same schedule on every machine.
//   - Audit reads the records of the run log (ReadLog fetches them from a
//     JetStream stream) with the client's acknowledged submissions and
//     reports every violation, the runs without an end and the figures
//     (ends, wake latencies). AuditSteps adds the budgets bucket's side
//     entries of the roots that keep their budget in their log.
//
// The harness itself (node and nats-server processes, kill -9, SIGSTOP,
// a filled tmpfs, the HTTP client that submits root runs with idempotency
// keys: researchers, whose children the parents wait for, and every third
// a fact-checker, which has no subagents and so keeps its budget in its
// log) lives in the package's tests:
//
//	go test -v ./test/chaos                      # one seed per topology, 4 faults
//	CAIRN_CHAOS_SEEDS=5 CAIRN_CHAOS_FAULTS=20 go test -timeout 3h -v ./test/chaos
//	CAIRN_CHAOS_SEED=1234 go test -v -run TestThreeNodes ./test/chaos   # replay a seed
//
// A replayed seed repeats the schedule (faults, targets, gaps, holds), not
// the interleaving: the runs' progress when a fault lands depends on the
// machine.
package chaos
