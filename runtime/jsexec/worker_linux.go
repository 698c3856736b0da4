//go:build linux

package jsexec

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"os"
	"strconv"
	"syscall"
)

// protocolOut moves the protocol off file descriptor 1 and points 1 at
// stderr, so that a stray print in the worker cannot corrupt a frame.
func protocolOut() (*os.File, error) {
	fd, err := syscall.Dup(1)
	if err != nil {
		return nil, fmt.Errorf("dup stdout: %w", err)
	}
	syscall.CloseOnExec(fd)
	if err := syscall.Dup3(2, 1, 0); err != nil {
		return nil, fmt.Errorf("redirect stdout: %w", err)
	}
	return os.NewFile(uintptr(fd), "protocol"), nil
}

// limitAddressSpace caps the process's address space (RLIMIT_AS) at its
// current size plus headroom and disables core dumps. It returns the idle
// size and the limit set.
func limitAddressSpace(headroom uint64) (idle, limit uint64, err error) {
	_ = syscall.Setrlimit(syscall.RLIMIT_CORE, &syscall.Rlimit{})
	idle, err = vmSize()
	if err != nil {
		return 0, 0, err
	}
	limit = idle + headroom
	if err := syscall.Setrlimit(syscall.RLIMIT_AS, &syscall.Rlimit{Cur: limit, Max: limit}); err != nil {
		return idle, 0, fmt.Errorf("setrlimit RLIMIT_AS: %w", err)
	}
	return idle, limit, nil
}

// vmSize reads the process's virtual size (VmSize) in bytes.
func vmSize() (uint64, error) {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0, err
	}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		fields := bytes.Fields(sc.Bytes())
		if len(fields) >= 2 && string(fields[0]) == "VmSize:" {
			kb, err := strconv.ParseUint(string(fields[1]), 10, 64)
			if err != nil {
				return 0, fmt.Errorf("parse VmSize: %w", err)
			}
			return kb << 10, nil
		}
	}
	return 0, errors.New("no VmSize in /proc/self/status")
}

// addrMeter reads the process's address space (VmSize, what RLIMIT_AS
// counts) from /proc/self/statm, kept open: a read costs a few
// microseconds, where /proc/self/status costs ~100.
type addrMeter struct {
	f   *os.File
	buf [128]byte
}

func openAddrMeter() *addrMeter {
	f, err := os.Open("/proc/self/statm")
	if err != nil {
		return &addrMeter{}
	}
	return &addrMeter{f: f}
}

// size is the address space in bytes, 0 when it cannot be read.
func (m *addrMeter) size() uint64 {
	if m.f == nil {
		return 0
	}
	n, err := m.f.ReadAt(m.buf[:], 0)
	if n == 0 && err != nil {
		return 0
	}
	field, _, _ := bytes.Cut(m.buf[:n], []byte(" "))
	pages, err := strconv.ParseUint(string(field), 10, 64)
	if err != nil {
		return 0
	}
	return pages * uint64(os.Getpagesize())
}

// workerSysProcAttr kills the worker when the thread that started it dies.
// The parent starts workers from a goroutine locked to its thread for the
// worker's lifetime, so that thread dies only with the parent process.
// The worker runs in a process group of its own, so a signal sent to the
// terminal's foreground group (Ctrl-C's SIGINT, Ctrl-\'s SIGQUIT) reaches
// the host only, which then cancels and stops its workers itself. The host
// kills a worker by its pid (the worker starts no process of its own).
func workerSysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL, Setpgid: true}
}

// signalNames are the names of the signals a worker may die of.
var signalNames = map[syscall.Signal]string{
	syscall.SIGHUP: "SIGHUP", syscall.SIGINT: "SIGINT", syscall.SIGQUIT: "SIGQUIT",
	syscall.SIGILL: "SIGILL", syscall.SIGTRAP: "SIGTRAP", syscall.SIGABRT: "SIGABRT",
	syscall.SIGBUS: "SIGBUS", syscall.SIGFPE: "SIGFPE", syscall.SIGKILL: "SIGKILL",
	syscall.SIGUSR1: "SIGUSR1", syscall.SIGSEGV: "SIGSEGV", syscall.SIGUSR2: "SIGUSR2",
	syscall.SIGPIPE: "SIGPIPE", syscall.SIGALRM: "SIGALRM", syscall.SIGTERM: "SIGTERM",
	syscall.SIGXCPU: "SIGXCPU", syscall.SIGXFSZ: "SIGXFSZ", syscall.SIGVTALRM: "SIGVTALRM",
	syscall.SIGPROF: "SIGPROF", syscall.SIGSYS: "SIGSYS", syscall.SIGPWR: "SIGPWR",
}

// faultSignals are raised by the process's own faults or limits, not sent
// by another process.
var faultSignals = map[syscall.Signal]bool{
	syscall.SIGILL: true, syscall.SIGTRAP: true, syscall.SIGABRT: true, syscall.SIGBUS: true,
	syscall.SIGFPE: true, syscall.SIGSEGV: true, syscall.SIGSYS: true, syscall.SIGXCPU: true, syscall.SIGXFSZ: true,
}

// exitSignal names the signal that ended a reaped process (state is
// cmd.ProcessState), "" if none did; fault reports a signal the process's
// own fault or limit raises rather than one sent from outside.
func exitSignal(state *os.ProcessState) (name string, fault bool) {
	if state == nil {
		return "", false
	}
	ws, ok := state.Sys().(syscall.WaitStatus)
	if !ok || !ws.Signaled() {
		return "", false
	}
	sig := ws.Signal()
	name, ok = signalNames[sig]
	if !ok {
		name = fmt.Sprintf("signal %d", int(sig))
	}
	return name, faultSignals[sig]
}
