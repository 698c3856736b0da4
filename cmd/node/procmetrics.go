package main

import (
	"fmt"
	"io"
	goruntime "runtime"
	"time"
)

// processStart is when this process started (near enough: when the
// package was initialized).
var processStart = time.Now()

// writeProcessMetrics writes the standard Go and process metrics, under
// the names Prometheus' own collectors use, so dashboards built for them
// work: goroutines, heap, GC cycles, CPU time, resident memory, open file
// descriptors and the start time. What the platform cannot tell (no /proc)
// is left out, not written as zero.
func writeProcessMetrics(w io.Writer) {
	var ms goruntime.MemStats
	goruntime.ReadMemStats(&ms)
	fmt.Fprintf(w, "# HELP go_goroutines Number of goroutines that currently exist.\n# TYPE go_goroutines gauge\ngo_goroutines %d\n", goruntime.NumGoroutine())
	fmt.Fprintf(w, "# HELP go_memstats_heap_alloc_bytes Number of heap bytes allocated and still in use.\n# TYPE go_memstats_heap_alloc_bytes gauge\ngo_memstats_heap_alloc_bytes %d\n", ms.HeapAlloc)
	fmt.Fprintf(w, "# HELP go_memstats_sys_bytes Number of bytes obtained from the system.\n# TYPE go_memstats_sys_bytes gauge\ngo_memstats_sys_bytes %d\n", ms.Sys)
	fmt.Fprintf(w, "# HELP go_gc_cycles_total Completed GC cycles.\n# TYPE go_gc_cycles_total counter\ngo_gc_cycles_total %d\n", ms.NumGC)
	writeOSMetrics(w)
	fmt.Fprintf(w, "# HELP process_start_time_seconds Start time of the process since unix epoch in seconds.\n# TYPE process_start_time_seconds gauge\nprocess_start_time_seconds %d\n", processStart.Unix())
}
