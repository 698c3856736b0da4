package actors

// SetTestHooks sets the hooks a wait calls once it has read its children
// and a wake calls when it finds the run's attempt running; the returned
// function clears them. Set them before a node starts, clear them after
// it is closed.
func SetTestHooks(waitRead, pending func(runID string)) (clear func()) {
	testHookWaitRead, testHookPending = waitRead, pending
	return func() { testHookWaitRead, testHookPending = nil, nil }
}

// SetTrackedHook sets the hook track calls when it has read a child
// running and is about to put it in the active set; the returned function
// clears it.
func SetTrackedHook(f func(sessionID, runID string)) (clear func()) {
	testHookTracked = f
	return func() { testHookTracked = nil }
}
