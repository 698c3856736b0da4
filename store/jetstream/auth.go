package jetstream

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sync"

	"github.com/nats-io/nats-server/v2/server"
)

// The users of an embedded server's client connections.
const (
	// AdminUser is the node itself: every permission.
	AdminUser = "cairn"
	// ReaderUser reads the run log (its stream, events.DefaultStream
	// unless ServerConfig.Stream names another) through JetStream
	// consumers and direct gets, and publishes nothing under cairn.>.
	ReaderUser = "reader"
	// RouteUser is the user name of the routes between clustered servers
	// (the password is the cluster's shared secret).
	RouteUser = "cairn-route"
)

// MinRouteSecret is the shortest route secret a cluster accepts (bytes).
const MinRouteSecret = 16

// Credentials are the passwords of an embedded server's two users.
type Credentials struct {
	// Admin is AdminUser's password.
	Admin string `json:"cairn"`
	// Reader is ReaderUser's password.
	Reader string `json:"reader"`
}

// GenerateCredentials makes two random 32-byte passwords (hex).
func GenerateCredentials() (*Credentials, error) {
	a, err := randomHex(32)
	if err != nil {
		return nil, err
	}
	r, err := randomHex(32)
	if err != nil {
		return nil, err
	}
	return &Credentials{Admin: a, Reader: r}, nil
}

func randomHex(n int) (string, error) {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		return "", fmt.Errorf("jetstream: credentials: %w", err)
	}
	return hex.EncodeToString(b), nil
}

func (c *Credentials) validate() error {
	if len(c.Admin) < 32 || len(c.Reader) < 32 {
		return errors.New("a password is missing or shorter than 32 characters")
	}
	return nil
}

// LoadCredentials reads a credentials file LoadOrCreateCredentials wrote.
// A file that others than its owner may read or write (a mode wider than
// 0600) is refused, naming the file and its mode.
func LoadCredentials(path string) (*Credentials, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("jetstream: credentials: %w", err)
	}
	if !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("jetstream: credentials file %s is not a regular file", path)
	}
	if perm := fi.Mode().Perm(); perm&0o077 != 0 {
		return nil, fmt.Errorf("jetstream: credentials file %s has mode %#o: it holds the NATS passwords and must be readable by its owner only (chmod 600 %s)", path, perm, path)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("jetstream: credentials: %w", err)
	}
	var c Credentials
	if err := json.Unmarshal(b, &c); err != nil {
		return nil, fmt.Errorf("jetstream: credentials file %s: %w", path, err)
	}
	if err := c.validate(); err != nil {
		return nil, fmt.Errorf("jetstream: credentials file %s: %w", path, err)
	}
	return &c, nil
}

// LoadOrCreateCredentials returns the credentials in path, generating them
// at the first call: written to a temporary file of mode 0600 in the same
// directory, synced, then renamed to path. A later call reads the same
// ones (LoadCredentials, which refuses a file with a mode wider than 0600).
func LoadOrCreateCredentials(path string) (*Credentials, error) {
	c, err := LoadCredentials(path)
	if err == nil || !errors.Is(err, fs.ErrNotExist) {
		return c, err
	}
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o750); err != nil {
		return nil, fmt.Errorf("jetstream: credentials: %w", err)
	}
	c, err = GenerateCredentials()
	if err != nil {
		return nil, err
	}
	b, err := json.MarshalIndent(c, "", "  ")
	if err != nil {
		return nil, err
	}
	f, err := os.CreateTemp(dir, ".nats-credentials-*")
	if err != nil {
		return nil, fmt.Errorf("jetstream: credentials: %w", err)
	}
	tmp := f.Name()
	defer func() { _ = os.Remove(tmp) }() // gone after the rename
	err = f.Chmod(0o600)
	if err == nil {
		_, err = f.Write(append(b, '\n'))
	}
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err != nil {
		return nil, fmt.Errorf("jetstream: credentials file %s: %w", path, err)
	}
	if d, err := os.Open(dir); err == nil { // the rename survives a crash
		_ = d.Sync()
		_ = d.Close()
	}
	return c, nil
}

// NodeConsumers are the names of the durable consumers the node keeps on
// the run log (actors' completion consumer): ReaderUser may not create,
// change, delete, pull from or acknowledge on them. NATS permissions match
// whole subject tokens, never part of one, so the node's consumers are
// kept from the reader by their names, not by a prefix; cmd/node's
// TestNodeDurablesAreReservedFromTheReader holds this list to the
// durables a serving node keeps.
func NodeConsumers() []string { return []string{"cairn_finished"} }

// ReaderPermissions are ReaderUser's: read stream through JetStream
// consumers of its own (create, inspect, pull, acknowledge, delete; push
// consumers' flow control), direct and API message gets and the stream's
// info, and subscribe only to reply inboxes (_INBOX.>, where natscli and
// nats.go receive replies and push deliveries). Consumers are created
// with their name in the subject (nats.go's and natscli's way), so that
// the node's (NodeConsumers), denied by name, are out of reach: the
// legacy endpoint that takes the name from the request's body (which no
// permission reads) is refused, as is everything on the node's consumers
// but their info. Nothing else may be published: no subject of the log
// (cairn.>), no other stream or bucket, no other JetStream API (no stream
// or consumer of another stream, no purge, no delete).
func ReaderPermissions(stream string) *server.Permissions {
	api := "$JS.API."
	var deny []string
	for _, c := range NodeConsumers() {
		deny = append(deny,
			api+"CONSUMER.CREATE."+stream+"."+c,
			api+"CONSUMER.CREATE."+stream+"."+c+".>",
			api+"CONSUMER.DELETE."+stream+"."+c,
			api+"CONSUMER.MSG.NEXT."+stream+"."+c,
			"$JS.ACK."+stream+"."+c+".>",
			"$JS.FC."+stream+"."+c+".>",
		)
	}
	return &server.Permissions{
		Publish: &server.SubjectPermission{Allow: []string{
			api + "INFO",
			api + "STREAM.INFO." + stream,
			api + "STREAM.MSG.GET." + stream,
			api + "DIRECT.GET." + stream,
			api + "DIRECT.GET." + stream + ".>",
			api + "CONSUMER.CREATE." + stream + ".>",
			api + "CONSUMER.INFO." + stream + ".>",
			api + "CONSUMER.MSG.NEXT." + stream + ".>",
			api + "CONSUMER.DELETE." + stream + ".>",
			"$JS.ACK." + stream + ".>",
			"$JS.FC." + stream + ".>",
		}, Deny: deny},
		Subscribe: &server.SubjectPermission{Allow: []string{"_INBOX.>"}},
	}
}

// nodeInbox is the prefix of the reply subjects of the node's own
// connections (Server.Connect): not under _INBOX.>, so a reader, who may
// subscribe there, does not see the replies the node receives (its
// buckets' values, other streams).
const nodeInbox = "_CAIRN_INBOX"

// users are the server's users for creds; the reader reads stream.
func users(c *Credentials, stream string) []*server.User {
	return []*server.User{
		{Username: AdminUser, Password: c.Admin},
		{Username: ReaderUser, Password: c.Reader, Permissions: ReaderPermissions(stream)},
	}
}

// ephemeral are the credentials of servers started without any (tests, an
// in-process server): one set per process, so that a server restarted in
// the same process (on the same port) accepts the clients of the one
// before it. Likewise the route secret of clusters configured without one.
var ephemeral struct {
	once        sync.Once
	creds       *Credentials
	routeSecret string
	err         error
}

func ephemeralAuth() (*Credentials, string, error) {
	ephemeral.once.Do(func() {
		ephemeral.creds, ephemeral.err = GenerateCredentials()
		if ephemeral.err == nil {
			ephemeral.routeSecret, ephemeral.err = randomHex(32)
		}
	})
	return ephemeral.creds, ephemeral.routeSecret, ephemeral.err
}
