//go:build !linux

package jsexec

import (
	"errors"
	"os"
	"syscall"
)

// protocolOut uses stdout as is.
func protocolOut() (*os.File, error) { return os.Stdout, nil }

// limitAddressSpace is Linux only: elsewhere a worker still isolates the
// process, but only the heap watchdog bounds its memory.
func limitAddressSpace(uint64) (uint64, uint64, error) {
	return 0, 0, errors.New("the worker address-space limit is implemented on Linux only")
}

func workerSysProcAttr() *syscall.SysProcAttr { return nil }

// addrMeter is Linux only: elsewhere there is no address-space limit to
// keep headroom under.
type addrMeter struct{}

func openAddrMeter() *addrMeter { return &addrMeter{} }
func (*addrMeter) size() uint64 { return 0 }

// exitSignal is Linux only: elsewhere a worker's death is described by its
// exit status alone.
func exitSignal(*os.ProcessState) (name string, fault bool) { return "", false }
