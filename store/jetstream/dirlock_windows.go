//go:build windows

package jetstream

import (
	"errors"
	"os"

	"golang.org/x/sys/windows"
)

// lockOffset is the byte locked: past the holder's record, which Windows'
// mandatory locks would otherwise keep the refused process from reading.
const lockOffset = 1 << 30

// tryLock takes an exclusive lock on one byte of f without waiting; false
// when another handle holds it.
func tryLock(f *os.File) (bool, error) {
	ol := windows.Overlapped{Offset: lockOffset}
	err := windows.LockFileEx(windows.Handle(f.Fd()), windows.LOCKFILE_EXCLUSIVE_LOCK|windows.LOCKFILE_FAIL_IMMEDIATELY, 0, 1, 0, &ol)
	switch {
	case err == nil:
		return true, nil
	case errors.Is(err, windows.ERROR_LOCK_VIOLATION):
		return false, nil
	default:
		return false, err
	}
}

func unlock(f *os.File) error {
	ol := windows.Overlapped{Offset: lockOffset}
	return windows.UnlockFileEx(windows.Handle(f.Fd()), 0, 1, 0, &ol)
}
