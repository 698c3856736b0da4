package natstest

import (
	"syscall"
	"testing"
)

// Tmpfs mounts a tmpfs of size (tmpfs's syntax: "16m") on a new temporary
// directory, unmounted in t.Cleanup, and returns the directory: a disk the
// test can fill. It skips the test where the machine allows no mount
// (neither root nor CAP_SYS_ADMIN): a full disk is then not reproduced.
func Tmpfs(t testing.TB, size string) string {
	t.Helper()
	dir := t.TempDir()
	if err := syscall.Mount("tmpfs", dir, "tmpfs", 0, "size="+size+",mode=0700"); err != nil {
		t.Skipf("a tmpfs cannot be mounted here (%v): the full disk is not reproduced", err)
	}
	t.Cleanup(func() {
		if err := syscall.Unmount(dir, 0); err != nil {
			_ = syscall.Unmount(dir, syscall.MNT_DETACH)
		}
	})
	return dir
}
