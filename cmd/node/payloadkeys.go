package main

import (
	"flag"
	"fmt"
	"io"
	"os"
	"runtime"

	"github.com/cairn-agents/cairn/events"
)

// payloadKeys is --payload-keys FILE (CAIRN_PAYLOAD_KEYS): the keys of the
// log's payload codec (events.Keyring), one "<id>:<base64 of 32 bytes>"
// entry per line, the first sealing what the node writes and every one
// opening what it reads. Without it the node writes plain events, and
// reading a sealed one fails naming its key.
type payloadKeys struct {
	path string
	ring *events.Keyring
}

func (k *payloadKeys) String() string { return k.path }

// Set reads and parses the file. A file others can read is refused, as ssh
// refuses such a private key: the keys open every run's transcript.
func (k *payloadKeys) Set(path string) error {
	info, err := os.Stat(path)
	if err != nil {
		return err
	}
	if runtime.GOOS != "windows" && info.Mode().Perm()&0o077 != 0 {
		return fmt.Errorf("%s is readable by others (mode %04o): chmod 600 it", path, info.Mode().Perm())
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	ring, err := events.ParseKeyring(string(b))
	if err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	k.path, k.ring = path, ring
	return nil
}

func payloadKeysFlag(fs *flag.FlagSet, k *payloadKeys) {
	fs.Var(k, "payload-keys", "file of AES-256 keys that seal the log's events at rest (first seals, all open; see docs/operations.md, Security)")
}

// payloadKeyCmd is `node payload-key [ID]`: a new key entry, for the
// --payload-keys file.
func payloadKeyCmd(args []string, stdout, stderr io.Writer) int {
	if len(args) > 1 {
		fmt.Fprintln(stderr, "node payload-key: want at most one key ID")
		return 2
	}
	id := "k1"
	if len(args) == 1 {
		id = args[0]
	}
	line, err := events.NewKey(id)
	if err != nil {
		fmt.Fprintln(stderr, "node payload-key:", err)
		return 2
	}
	fmt.Fprintln(stdout, line)
	return 0
}
