// Package mcp binds the tools of Model Context Protocol servers as Cairn
// capabilities: a run's JavaScript calls `await caps.<server>.<tool>(args)`,
// and the call goes through the canonical invoker like any capability
// (arguments validated against the gated schema, host authorization, result
// redacted before JavaScript sees it, attribution recorded; runtime/jstool),
// then to this package's Backend, which calls the tool on its server with
// the official Go SDK (github.com/modelcontextprotocol/go-sdk).
//
//	cfg, err := mcp.LoadConfig("mcp.yaml")
//	host, err := mcp.Start(ctx, cfg, mcp.Options{Logger: logger, Blobs: blobs, Redactor: redactor})
//	defer host.Close(ctx)
//	catalog = append(catalog, host.Capabilities()...)
//	// grant each agent host.Grants()[slug]; give each run host.Backend(agent, next)
//
// # Servers
//
// A server is a stdio command (started by the node, restarted with
// exponential backoff when it exits, its stderr logged line by line after
// redaction) or a streamable-HTTP URL (reconnected the same way). Its tools
// are listed at start and again on notifications/tools/list_changed and on
// every reconnect. Only the tools on the server's allow-list are bound, and
// only the agents the configuration names may call them: the grant is
// checked on every call (C10).
//
// A stdio server inherits only HOME, LOGNAME, PATH, SHELL, TERM, USER, LANG
// and TMPDIR of the node's environment, plus its configured env: the node's
// own credentials never reach it. Header values, and env values whose names
// look secret, are redacted by the node (cmd/node) like its own keys.
//
// The catalog is fixed at start: it is part of every run's contract hash
// (C9), so a tool that disappears, or changes its input schema or (by its
// annotations) its effect class, is not silently rebound. Calls to it fail
// (ErrUnavailable) until the server offers it again as it was bound, or the
// node restarts and binds it anew.
// The same hash means a server upgrade that changes a bound tool's
// description or schema between two starts of the node fails the contract
// check of every run in flight (they were planned against the old tools):
// pin the servers' versions, and upgrade them between runs.
//
// # Schemas
//
// Every input schema passes Cairn's gate (runtime/schema). Before the gate,
// convertSchema rewrites a few keywords outside Cairn's vocabulary into
// equivalent ones (the rewrites accept exactly the same arguments, and are
// logged): content* annotations are removed, a propertyNames that accepts
// every string is removed, if/then/else and dependentRequired,
// dependentSchemas and draft-07 dependencies become anyOf. Any other
// keyword the gate refuses stops the start with a *SchemaError naming the
// server, the tool, the keyword and its JSON pointer. A schema is never
// weakened to make it pass. Numbers in schemas travel through the SDK as
// float64: an integer bound above 2^53 may be rounded.
//
// # Effects
//
// A tool's effect class comes from its annotations: readOnlyHint is
// read-only; else idempotentHint is idempotent; else effectful
// (destructiveHint does not change the class, since neither destructive nor
// additive updates are safe to repeat, but a tool marked destructive says
// so in its description). No annotations is effectful. Annotations are
// hints from the server: the configuration's effects map overrides them.
// The class is shown to the model with the capability and in every
// unknown-effect notice of an interrupted run_js (C20).
//
// # Results
//
// The callback's value is {text, structured?, attachments?, links?}: the
// text blocks joined by newlines, the structured content, the attachments
// (images, audio and embedded resources, stored through Options.Blobs: host
// storage references, C16; their bytes never enter JavaScript), and resource
// links. A result with isError throws in JavaScript (ErrToolError), and so
// does a call the server refused (ErrRefused) or a connection lost during
// the call (ErrServerLost: the call may or may not have taken effect).
//
// # The caller's duties
//
//  1. Start the Host before the node's actors, add Capabilities() to the
//     catalog and each agent's Grants() to its definition's capabilities.
//  2. Give each run Backend(agent, next), next serving the other
//     capabilities.
//  3. Close the Host after the node: in-flight calls fail with
//     ErrServerLost, and their scripts' outcomes are unknown effects.
package mcp
