//go:build unix

package jetstream

import "syscall"

// fileSystemSize is the size of the file system that holds dir, in bytes:
// its total, not its free space; 0 when it cannot be read.
func fileSystemSize(dir string) int64 {
	var fs syscall.Statfs_t
	if err := syscall.Statfs(dir, &fs); err != nil {
		return 0
	}
	return int64(fs.Blocks) * int64(fs.Bsize)
}
