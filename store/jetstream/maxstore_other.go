//go:build !unix

package jetstream

// fileSystemSize cannot read the file system here: the server derives its
// limit itself.
func fileSystemSize(string) int64 { return 0 }
