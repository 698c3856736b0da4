package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"strconv"

	"github.com/cairn-agents/cairn/store/jetstream"
)

// credentialsFile is where the embedded NATS server's credentials live in
// the data directory: generated at the node's first start (mode 0600),
// reused afterwards.
const credentialsFile = "nats-credentials.json"

func credentialsPath(data string) string { return filepath.Join(data, credentialsFile) }

// routeSecretEnv is the shared secret of the routes between the embedded
// servers of a cluster (--nats-cluster): the environment only, never a
// flag or a file, never logged.
const routeSecretEnv = "CAIRN_NATS_ROUTE_SECRET"

// routeSecret is the cluster's route secret, or an error naming its
// variable.
func routeSecret() (string, error) {
	s := os.Getenv(routeSecretEnv)
	switch {
	case s == "":
		return "", fmt.Errorf("--nats-cluster: %s is not set: the routes between the nodes' NATS servers authenticate with a secret the operator gives every node (the same on all, at least %d bytes)", routeSecretEnv, jetstream.MinRouteSecret)
	case len(s) < jetstream.MinRouteSecret:
		return "", fmt.Errorf("%s: %d bytes, want at least %d", routeSecretEnv, len(s), jetstream.MinRouteSecret)
	}
	return s, nil
}

// credsCmd is `node creds`: how to point natscli at the node's embedded
// NATS server (its --nats-listen), as the reader and as the node itself.
func credsCmd(args []string, stdout, stderr io.Writer) int {
	set := flag.NewFlagSet("node creds", flag.ContinueOnError)
	set.SetOutput(stderr)
	data := set.String("data", ".cairn", "data directory of the node (its embedded server's credentials)")
	listen := set.String("nats-listen", "", "the node's --nats-listen host:port, for the server URL")
	ca := set.String("nats-tls-ca", "", "the node's --nats-tls-ca, when its server speaks TLS")
	var stream string
	streamFlag(set, &stream)
	if err := parseFlags(set, args, "data", "nats-listen", "nats-tls-ca", "stream"); err != nil {
		return parseFailed(stderr, "node creds", err)
	}
	if set.NArg() > 0 {
		fmt.Fprintf(stderr, "node creds: unexpected argument %q\n", set.Arg(0))
		return 2
	}
	scheme := "nats"
	if *ca != "" {
		scheme = "tls"
	}
	server := scheme + "://HOST:PORT"
	if *listen != "" {
		host, port, err := hostPort(*listen)
		if err != nil {
			fmt.Fprintln(stderr, "node creds: --nats-listen:", err)
			return 2
		}
		if host == "" || net.ParseIP(host) != nil && net.ParseIP(host).IsUnspecified() {
			host = "127.0.0.1"
		}
		server = scheme + "://" + net.JoinHostPort(host, strconv.Itoa(port))
	}
	c, err := jetstream.LoadCredentials(credentialsPath(*data))
	if errors.Is(err, fs.ErrNotExist) {
		fmt.Fprintf(stderr, "node creds: no credentials in %s yet: a node makes them at its first start with --data %s\n", *data, *data)
		return 1
	}
	if err != nil {
		fmt.Fprintln(stderr, "node creds:", err)
		return 1
	}
	if *ca != "" {
		server += " --tlsca " + *ca
	}
	fmt.Fprintf(stdout, `# The run log, read only (the %[6]s stream through consumers and direct gets;
# no publish under cairn.>). For event-stream consumers:
nats --server %[1]s --user %[2]s --password %[3]s stream view %[6]s

# WARNING: the node's own user: every permission, including writing the run
# log and its buckets. For an operator's repairs only; never hand it out.
nats --server %[1]s --user %[4]s --password %[5]s
`, server, jetstream.ReaderUser, c.Reader, jetstream.AdminUser, c.Admin, stream)
	return 0
}
