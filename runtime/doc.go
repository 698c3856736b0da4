// Package runtime is Cairn's run loop: Run(ctx, Input) runs one attempt of
// an agent task against an injected model, store, controller, capability
// backend and JavaScript executor, and leaves a durable checkpoint after
// every step so that a later attempt resumes exactly where this one stopped.
// What it guarantees, and what it requires of the store, the controller and
// the other parts the host plugs in, is the run contract in the
// repository's docs/contract.md; code and tests cite its clauses by number
// (C1-C42 for the loop and its store, D1-D6 for the design around it).
//
// A minimal host:
//
//	res, err := runtime.Run(ctx, runtime.Input{
//		Definition: def, Subagents: children, Model: m,
//		ModelLimits: runtime.ModelLimits{ContextTokens: 128000, OutputTokens: 4096},
//		Store: store, Backend: backend, ExecutorFactory: executors,
//		Controller: controller, Sink: sink, Redactor: redactor,
//		Message: "What changed in the release?", Capabilities: catalog,
//	})
//	switch {
//	case errors.Is(err, runtime.ErrWaiting):
//		// Parked: release the worker; wake it when Controller.Wait's
//		// dependencies or deadline fire, then call Run again.
//	case err != nil:
//		// Recover or settle the attempt by host policy; Run again resumes.
//	default:
//		// res.Reply is committed. Log res.CleanupError if set.
//	}
//
// # The host's duties
//
//  1. Scope the Store to one run and its session, under a durable lease that
//     fences older writers; never use store/memory in production (C18).
//  2. Authorize every Controller and Backend operation itself: nothing the
//     model sends (arguments, call IDs) and nothing in a checkpoint is
//     authority (C10).
//  3. Own the budgets: BeforeModel reserves durably before each request
//     (C24, C35); wrap the Model with model.WithUsage to record every
//     reported token (C34).
//  4. On ErrWaiting, persist nothing more: Controller.Wait already recorded
//     the dependencies and the original deadline (C28).
//  5. On any other error, run again later: the durable checkpoint decides
//     what happens (interrupted run_js, get_calls and cancel_calls become
//     unknown-effect notices; spawn, continue, wait and complete are
//     redispatched with the same tool-call ID, C20).
//
// # Determinism
//
// Given the same durable state and the same answers from its injected
// interfaces, an attempt makes the same commits, byte for byte:
//
//   - no goroutines: calls run one after another in the order the model
//     gave them (C32);
//   - no clock reads except Input.Clock, and only for attribution;
//   - one random value per run, the run key chosen at revision 1 through
//     Input.IDs, from which every message ID is derived (key-revision-index),
//     so a retried commit carries the same IDs;
//   - no map iteration where order reaches a commit, a request or a sink.
//
// # Commits
//
// Each SaveCheckpoint is one revision (+1) carrying the checkpoint and the
// transcript messages it appends (C12, C17). A model step is:
//
//	response  the assistant message; the calls journaled, the first one
//	          dispatching (its predispatch checkpoint)
//	call i    its result (postresult), merged with call i+1's predispatch,
//	          or with the phase change to the next model request
//	complete  its result, skipped results for the rest, and the Reply
//
// The checkpoint in phase "model" is saved before BeforeModel (C35).
package runtime
