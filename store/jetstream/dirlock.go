package jetstream

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// lockName is the file in a store directory that an embedded server holds
// locked while it runs. nats-server does not lock its store: two servers on
// one directory (a `node replay --data` beside the serving node, a second
// node started by mistake) each write the same stream files and corrupt
// them. The lock is an OS file lock (flock, LockFileEx), released by the
// OS when the process dies, kill -9 included: no stale lock to clear.
const lockName = "cairn.lock"

// ErrStoreInUse is returned by StartServer when another process runs an
// embedded server on the same store directory; the error names it.
var ErrStoreInUse = errors.New("jetstream: the store directory is in use")

// Holder is what a lock's holder writes into the lock file, for the
// process refused to name it.
type Holder struct {
	PID     int       `json:"pid"`
	Command string    `json:"command"`
	Since   time.Time `json:"since"`
}

func (h Holder) String() string {
	return fmt.Sprintf("process %d (%s), since %s", h.PID, h.Command, h.Since.Format(time.RFC3339))
}

// storeInUse is ErrStoreInUse for one directory and its holder.
type storeInUse struct {
	dir    string
	holder *Holder // nil when the file could not be read
}

func (e *storeInUse) Error() string {
	who := "another process"
	if e.holder != nil {
		who = e.holder.String()
	}
	return fmt.Sprintf("jetstream: server: store directory %s is in use by %s: stop it, or connect to its NATS server (--nats) instead of starting another on the same store", e.dir, who)
}

func (e *storeInUse) Is(target error) bool { return target == ErrStoreInUse }

// dirLock is a held lock on a store directory.
type dirLock struct{ f *os.File }

// lockDir takes the lock of dir, or returns an error matching
// ErrStoreInUse that names the process holding it.
func lockDir(dir string) (*dirLock, error) {
	path := filepath.Join(dir, lockName)
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("jetstream: server: lock %s: %w", path, err)
	}
	held, err := tryLock(f)
	if err != nil {
		_ = f.Close()
		return nil, fmt.Errorf("jetstream: server: lock %s: %w", path, err)
	}
	if !held {
		_ = f.Close()
		return nil, &storeInUse{dir: dir, holder: readHolder(path)}
	}
	h := Holder{PID: os.Getpid(), Command: command(os.Args), Since: time.Now().UTC()}
	b, _ := json.Marshal(h)
	if err := f.Truncate(0); err == nil {
		_, err = f.WriteAt(append(b, '\n'), 0)
	}
	if err != nil {
		_ = unlock(f)
		_ = f.Close()
		return nil, fmt.Errorf("jetstream: server: lock %s: %w", path, err)
	}
	return &dirLock{f: f}, nil
}

// command names a process by its program and its subcommand, when its
// first argument is one ("node serve"): never the whole command line, whose flags may
// carry a secret (--token) that the lock file and the refused process's
// error would then show.
func command(args []string) string {
	if len(args) == 0 {
		return "?"
	}
	name := filepath.Base(args[0])
	if len(args) > 1 && !strings.HasPrefix(args[1], "-") {
		return name + " " + args[1]
	}
	return name
}

// readHolder reads the holder a lock file names (nil if it names none).
func readHolder(path string) *Holder {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil
	}
	var h Holder
	if json.Unmarshal(b, &h) != nil || h.PID == 0 {
		return nil
	}
	return &h
}

// release lets the lock go. The file stays: removing it would let a
// process that opened it just before hold a lock on a file no longer in
// the directory while a third one creates and locks a new one.
func (l *dirLock) release() error {
	if l == nil || l.f == nil {
		return nil
	}
	err := unlock(l.f)
	if cerr := l.f.Close(); err == nil {
		err = cerr
	}
	l.f = nil
	return err
}
