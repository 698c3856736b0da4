package actors

// SetTestHooks sets the hooks a wait calls once it has read its children
// and a wake calls when it finds the run's attempt running; the returned
// function clears them. Set them before a node starts, clear them after
// it is closed.
func SetTestHooks(waitRead, pending func(runID string)) (clear func()) {
	testHookWaitRead, testHookPending = waitRead, pending
	return func() { testHookWaitRead, testHookPending = nil, nil }
}
