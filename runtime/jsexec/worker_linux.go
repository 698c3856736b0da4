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

// workerSysProcAttr kills the worker when the thread that started it dies.
// The parent starts workers from a goroutine locked to its thread for the
// worker's lifetime, so that thread dies only with the parent process.
func workerSysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
