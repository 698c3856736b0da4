//go:build unix

package main

import (
	"fmt"
	"io"
	"os"
	"syscall"
	"time"
)

// writeOSMetrics writes the process metrics the system tells: CPU time,
// resident memory and open file descriptors (the last two from /proc,
// where there is one).
func writeOSMetrics(w io.Writer) {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) == nil {
		cpu := time.Duration(ru.Utime.Nano() + ru.Stime.Nano()).Seconds()
		fmt.Fprintf(w, "# HELP process_cpu_seconds_total Total user and system CPU time spent in seconds.\n# TYPE process_cpu_seconds_total counter\nprocess_cpu_seconds_total %g\n", cpu)
	}
	if rss, ok := residentBytes(); ok {
		fmt.Fprintf(w, "# HELP process_resident_memory_bytes Resident memory size in bytes.\n# TYPE process_resident_memory_bytes gauge\nprocess_resident_memory_bytes %d\n", rss)
	}
	if fds, err := os.ReadDir("/proc/self/fd"); err == nil {
		fmt.Fprintf(w, "# HELP process_open_fds Number of open file descriptors.\n# TYPE process_open_fds gauge\nprocess_open_fds %d\n", len(fds))
	}
}

// residentBytes reads the resident set size from /proc/self/statm.
func residentBytes() (int64, bool) {
	b, err := os.ReadFile("/proc/self/statm")
	if err != nil {
		return 0, false
	}
	var size, resident int64
	if _, err := fmt.Sscanf(string(b), "%d %d", &size, &resident); err != nil {
		return 0, false
	}
	return resident * int64(os.Getpagesize()), true
}
