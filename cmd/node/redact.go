package main

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/cairn-agents/cairn/api"
	mcpcaps "github.com/cairn-agents/cairn/capabilities/mcp"
	"github.com/cairn-agents/cairn/runtime"
	"github.com/cairn-agents/cairn/runtime/redact"
	"github.com/cairn-agents/cairn/store/jetstream"
)

// The node's secrets: every value it is given that is a secret registers,
// by name, with one redactor (nodeRedactor), which every view, log, sink,
// model request and CLI output passes through. The names say where each
// came from; never the value.
//
// What counts:
//
//   - the provider keys (OPENAI_API_KEY, ANTHROPIC_API_KEY) and a password
//     in OPENAI_BASE_URL or ANTHROPIC_BASE_URL;
//   - every MCP server's env values and headers (and the token of a
//     Bearer or Basic header, and a URL's password), but the env variables
//     and headers nonSecretEnv and nonSecretHeaders name;
//   - the embedded NATS server's passwords (DATA/nats-credentials.json),
//     a password in --nats's URL, and CAIRN_NATS_ROUTE_SECRET;
//   - the API tokens (--token, CAIRN_TOKENS) and --metrics-token;
//   - the payload keys (--payload-keys).
//
// Of these, runtime.NewSecrets refuses placeholders and values too short
// to be secrets (a warning names each).

// secretNames are candidates by name, as runtime.NewSecrets takes them.
type secretNames map[string]string

func (s secretNames) add(name, value string) {
	if value != "" {
		s[name] = value
	}
}

// providerSecrets are the provider keys, and a password in a provider's
// base URL.
func providerSecrets(out secretNames) {
	for _, v := range []string{"OPENAI_API_KEY", "ANTHROPIC_API_KEY"} {
		out.add(v, os.Getenv(v))
	}
	for _, v := range []string{"OPENAI_BASE_URL", "ANTHROPIC_BASE_URL"} {
		urlSecrets(out, v, os.Getenv(v))
	}
}

// urlSecrets adds the password of a URL's user information.
func urlSecrets(out secretNames, name, raw string) {
	if u, err := url.Parse(raw); err == nil && u.User != nil {
		if pw, ok := u.User.Password(); ok {
			out.add(name+" password", pw)
		}
	}
}

// nonSecretEnv are MCP server env variables whose values are no secrets
// (paths, locales, modes): as patterns they would corrupt ordinary text
// ("production", "/usr/bin"). Every other variable's value is taken,
// whatever its name.
var nonSecretEnv = map[string]bool{
	"PATH": true, "HOME": true, "USER": true, "LOGNAME": true, "SHELL": true, "TERM": true, "TMPDIR": true, "TZ": true, "PWD": true,
	"LANG": true, "LANGUAGE": true, "NODE_ENV": true, "NODE_OPTIONS": true, "NODE_PATH": true, "PYTHONPATH": true, "PYTHONUNBUFFERED": true,
	"PYTHONIOENCODING": true, "DEBUG": true, "LOG_LEVEL": true, "LOGLEVEL": true, "NO_COLOR": true, "FORCE_COLOR": true,
}

// nonSecretHeaders are MCP server headers whose values are no secrets
// (canonical names).
var nonSecretHeaders = map[string]bool{
	"Accept": true, "Accept-Encoding": true, "Accept-Language": true, "Cache-Control": true, "Connection": true,
	"Content-Language": true, "Content-Type": true, "Mcp-Protocol-Version": true, "Origin": true, "Pragma": true,
	"Referer": true, "User-Agent": true,
}

// mcpSecrets are the secrets of the MCP servers' configuration.
func mcpSecrets(out secretNames, cfg *mcpcaps.Config) {
	for _, s := range cfg.Servers {
		for k, v := range s.Headers {
			if nonSecretHeaders[canonicalHeader(k)] {
				continue
			}
			name := fmt.Sprintf("mcp server %s header %s", s.Name, k)
			out.add(name, v)
			scheme, cred, ok := strings.Cut(strings.TrimSpace(v), " ")
			if !ok {
				continue
			}
			out.add(name+" (token)", strings.TrimSpace(cred)) // the token of "Bearer <token>"
			if strings.EqualFold(scheme, "Basic") {
				if b, err := base64.StdEncoding.DecodeString(strings.TrimSpace(cred)); err == nil {
					if _, pw, ok := strings.Cut(string(b), ":"); ok {
						out.add(name+" (password)", pw)
					}
				}
			}
		}
		for k, v := range s.Env {
			if !nonSecretEnv[strings.ToUpper(k)] && !strings.HasPrefix(strings.ToUpper(k), "LC_") {
				out.add(fmt.Sprintf("mcp server %s env %s", s.Name, k), v)
			}
		}
		urlSecrets(out, fmt.Sprintf("mcp server %s url", s.Name), s.URL)
	}
}

func canonicalHeader(k string) string {
	parts := strings.Split(strings.ToLower(strings.TrimSpace(k)), "-")
	for i, p := range parts {
		if p != "" {
			parts[i] = strings.ToUpper(p[:1]) + p[1:]
		}
	}
	return strings.Join(parts, "-")
}

// natsSecrets are the embedded server's passwords (its data directory's
// credentials file, when there is one), a password in the --nats URL and
// the route secret.
func natsSecrets(out secretNames, data, natsURL string) error {
	out.add(routeSecretEnv, os.Getenv(routeSecretEnv))
	urlSecrets(out, "--nats", natsURL)
	if natsURL != "" || data == "" {
		return nil
	}
	c, err := jetstream.LoadCredentials(credentialsPath(data))
	if errors.Is(err, fs.ErrNotExist) {
		return nil // no server was started here yet
	}
	if err != nil {
		return err
	}
	out.add("nats credentials (cairn)", c.Admin)
	out.add("nats credentials (reader)", c.Reader)
	return nil
}

// tokenSecrets are the API tokens (token to principal) and the metrics
// token.
func tokenSecrets(out secretNames, tokens map[string]string, metricsToken string) {
	for tok, who := range tokens {
		out.add("token of principal "+who, tok)
	}
	out.add("--metrics-token", metricsToken)
}

// payloadKeySecrets are the keys of a --payload-keys file: each entry's
// base64, as the file holds it.
func payloadKeySecrets(out secretNames, path string) error {
	if path == "" {
		return nil
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	for _, line := range strings.Split(string(b), "\n") {
		if id, key, ok := strings.Cut(strings.TrimSpace(line), ":"); ok && !strings.HasPrefix(id, "#") {
			out.add("payload key "+strings.TrimSpace(id), strings.TrimSpace(key))
		}
	}
	return nil
}

// nodeSecrets are the candidates of a node with options o: everything the
// package comment lists. A source that cannot be read is an error naming
// it; the candidates of the others are returned with it.
func nodeSecrets(o nodeOptions) (secretNames, error) {
	out := secretNames{}
	providerSecrets(out)
	var errs []error
	if o.mcpServers != "" {
		if cfg, err := mcpcaps.LoadConfig(o.mcpServers); err != nil {
			errs = append(errs, err)
		} else {
			mcpSecrets(out, cfg)
		}
	}
	if err := natsSecrets(out, o.data, o.natsURL); err != nil {
		errs = append(errs, err)
	}
	if err := payloadKeySecrets(out, o.keys.path); err != nil {
		errs = append(errs, fmt.Errorf("payload keys: %w", err))
	}
	for k, v := range o.secrets {
		out.add(k, v)
	}
	return out, errors.Join(errs...)
}

// nodeRedactor is the node's one redactor, of nodeSecrets(o). It warns,
// by name, of each candidate refused as a pattern and of a source it could
// not read; redacts the node's log from then on (logRedactor); and, with
// the embedded server, records the names it registered in the data
// directory, so that `node replay` can tell whether it has them all
// (secretsRecord).
func nodeRedactor(o nodeOptions) *redact.Set {
	cands, err := nodeSecrets(o)
	if err != nil && o.logger != nil {
		o.logger.Warn("a source of secrets could not be read: its secrets are not redacted", "err", err)
	}
	patterns, refused := runtime.NewSecrets(cands)
	warnRefused(o.logger, refused)
	set := patterns.Compile()
	installLogRedactor(o.logger, set)
	if o.natsURL == "" && o.data != "" {
		if err := writeSecretsRecord(o.data, registered(cands, refused)); err != nil && o.logger != nil {
			o.logger.Warn("the names of the node's secrets were not recorded: node replay will want --raw", "err", err)
		}
	}
	return set
}

// registered are the names of cands that are patterns (not refused).
func registered(cands secretNames, refused []runtime.RefusedSecret) []string {
	var out []string
	for name, v := range cands {
		if strings.TrimSpace(v) != "" && !slices.ContainsFunc(refused, func(r runtime.RefusedSecret) bool { return r.Name == name }) {
			out = append(out, name)
		}
	}
	slices.Sort(out)
	return out
}

// secretsRecordFile, in the data directory, names the secrets the node
// registered at its last start (names only, never values).
const secretsRecordFile = "redaction-sources.json"

type secretsRecord struct {
	// Sources are the names of the secrets the node redacts.
	Sources []string `json:"sources"`
}

func writeSecretsRecord(data string, names []string) error {
	b, err := json.MarshalIndent(secretsRecord{Sources: names}, "", "  ")
	if err != nil {
		return err
	}
	tmp := filepath.Join(data, secretsRecordFile+".tmp")
	if err := os.WriteFile(tmp, append(b, '\n'), 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, filepath.Join(data, secretsRecordFile))
}

// readSecretsRecord is the record in data; ok is false when there is none
// (a node of an earlier build, or one on an external NATS server).
func readSecretsRecord(data string) (names []string, ok bool, err error) {
	b, err := os.ReadFile(filepath.Join(data, secretsRecordFile))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, err
	}
	var r secretsRecord
	if err := json.Unmarshal(b, &r); err != nil {
		return nil, false, fmt.Errorf("%s: %w", secretsRecordFile, err)
	}
	return r.Sources, true, nil
}

// providerKeys are the candidates of the provider keys alone.
func providerKeys() secretNames {
	out := secretNames{}
	providerSecrets(out)
	return out
}

// redactor is a redactor of the provider keys alone (a re-drive's: the
// commits it checks do not depend on it). It warns of refused keys.
func redactor(logger *slog.Logger) *redact.Set {
	s, refused := runtime.NewSecrets(providerKeys())
	warnRefused(logger, refused)
	return s.Compile()
}

// warnRefused logs the candidates refused as redaction patterns by name.
func warnRefused(logger *slog.Logger, refused []runtime.RefusedSecret) {
	if logger == nil {
		return
	}
	for _, r := range refused {
		logger.Warn("not used as a redaction pattern", "variable", r.Name, "reason", r.Reason)
	}
}

// The node's log is redacted as it is written: logOptions.logger's
// handler writes through a logWriter, whose redactor the node installs
// once it has registered its secrets (installLogRedactor). Records logged
// before (the start's) are written as they are.

// logWriter redacts each write (slog's handlers write one record a
// call) with the redactor installed, if any.
type logWriter struct {
	w   io.Writer
	red atomic.Pointer[redact.Set]
	mu  sync.Mutex
}

func (l *logWriter) Write(p []byte) (int, error) {
	out := p
	if red := l.red.Load(); red != nil {
		out = []byte(red.Redact(string(p)))
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if _, err := l.w.Write(out); err != nil {
		return 0, err
	}
	return len(p), nil
}

// redactingHandler is a slog.Handler writing through a logWriter: the
// node finds the writer on its logger's handler (installLogRedactor).
type redactingHandler struct {
	slog.Handler
	out *logWriter
}

func (h redactingHandler) WithAttrs(attrs []slog.Attr) slog.Handler {
	return redactingHandler{Handler: h.Handler.WithAttrs(attrs), out: h.out}
}

func (h redactingHandler) WithGroup(name string) slog.Handler {
	return redactingHandler{Handler: h.Handler.WithGroup(name), out: h.out}
}

// redactingLogger is a logger whose records newHandler writes to w
// through a logWriter.
func redactingLogger(w io.Writer, newHandler func(io.Writer) slog.Handler) *slog.Logger {
	out := &logWriter{w: w}
	return slog.New(redactingHandler{Handler: newHandler(out), out: out})
}

// installLogRedactor makes logger's records redacted with red from now on,
// when logger is a redactingLogger (the node's are); others are left.
func installLogRedactor(logger *slog.Logger, red *redact.Set) {
	if logger == nil {
		return
	}
	if h, ok := logger.Handler().(redactingHandler); ok {
		h.out.red.Store(red)
	}
}

// redactingWriter redacts what passes through it, at Flush, as a whole:
// text (a secret may hold a newline, so no line is safe to write before
// the end), or with json one JSON document or more, redacted on their
// decoded strings.
type redactingWriter struct {
	w    io.Writer
	red  runtime.Redactor
	json bool
	buf  []byte
}

func (r *redactingWriter) Write(p []byte) (int, error) {
	r.buf = append(r.buf, p...)
	return len(p), nil
}

// Flush writes what was written, redacted.
func (r *redactingWriter) Flush() error {
	if len(r.buf) == 0 {
		return nil
	}
	var out []byte
	if r.json {
		out = api.RedactJSON(r.red, r.buf)
		var pretty bytes.Buffer // as the command printed it: indented
		if bytes.Contains(r.buf, []byte("\n  ")) && json.Indent(&pretty, out, "", "  ") == nil {
			out = pretty.Bytes()
		}
		if bytes.HasSuffix(r.buf, []byte("\n")) {
			out = append(out, '\n')
		}
	} else {
		out = []byte(r.red.Redact(string(r.buf)))
	}
	r.buf = nil
	_, err := r.w.Write(out)
	return err
}

// serveSecrets are the secrets serve is given besides those the node
// reads itself: the API tokens and the metrics token.
func serveSecrets(o serveOptions) secretNames {
	out := secretNames{}
	tokenSecrets(out, o.tokens, o.metricsToken)
	return out
}
