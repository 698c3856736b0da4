//go:build race

package jsexec

// raceEnabled: the race detector slows goja about tenfold.
const raceEnabled = true
