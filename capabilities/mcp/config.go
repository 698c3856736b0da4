package mcp

import (
	"encoding/json"
	"fmt"
	"os"
	"regexp"
	"strings"
	"time"

	"github.com/goccy/go-yaml"

	"github.com/cairn-agents/cairn/runtime"
)

// Config lists the MCP servers a node binds capabilities from.
type Config struct {
	// Servers are the MCP servers; names must be unique.
	Servers []ServerConfig `json:"servers"`
}

// ServerConfig is one MCP server. Exactly one of Command and URL is set.
type ServerConfig struct {
	// Name is the capability namespace: tools are bound as
	// caps.<Name>.<tool>. A JavaScript identifier; required.
	Name string `json:"name"`
	// Command starts a stdio server: the program and its arguments. The
	// node starts it, restarts it with backoff when it exits, and logs its
	// stderr (redacted) line by line.
	Command []string `json:"command,omitempty"`
	// Env sets variables of the command's environment. Of the node's own
	// environment it inherits only HOME, LOGNAME, PATH, SHELL, TERM, USER,
	// LANG and TMPDIR: the node's credentials never reach a server.
	Env map[string]string `json:"env,omitempty"`
	// Dir is the command's working directory; empty means the node's.
	Dir string `json:"dir,omitempty"`
	// URL is a streamable-HTTP server's endpoint (http or https).
	URL string `json:"url,omitempty"`
	// Headers are sent with every HTTP request (an Authorization header,
	// say). Their values are secrets: they never reach a log.
	Headers map[string]string `json:"headers,omitempty"`
	// Tools is the allow-list: the MCP tool names this server may expose.
	// Every one must be offered by the server at start. Required.
	Tools []string `json:"tools"`
	// Agents are the agent slugs that may call these tools. Each listed
	// agent is granted every allowed tool; no other agent may call them.
	// Required.
	Agents []string `json:"agents"`
	// Effects overrides the effect class derived from a tool's annotations:
	// tool name to read-only, idempotent or effectful.
	Effects map[string]string `json:"effects,omitempty"`
	// CallTimeout bounds one tool call, waiting for a restarting server
	// included ("30s"); empty means 60s.
	CallTimeout string `json:"call_timeout,omitempty"`
}

var identRE = regexp.MustCompile(`^[A-Za-z_$][A-Za-z0-9_$]*$`)

// LoadConfig reads a Config from a YAML or JSON file (by extension: .json
// is JSON, anything else YAML). Unknown fields are errors, and the result
// is validated.
func LoadConfig(path string) (*Config, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("mcp config: %w", err)
	}
	cfg, err := ParseConfig(raw, !strings.HasSuffix(path, ".json"))
	if err != nil {
		return nil, fmt.Errorf("mcp config %s: %w", path, err)
	}
	return cfg, nil
}

// ParseConfig decodes and validates a Config from YAML (isYAML) or JSON.
func ParseConfig(raw []byte, isYAML bool) (*Config, error) {
	js := raw
	if isYAML {
		var err error
		if js, err = yaml.YAMLToJSON(raw); err != nil {
			return nil, fmt.Errorf("not valid YAML: %w", err)
		}
	}
	dec := json.NewDecoder(strings.NewReader(string(js)))
	dec.DisallowUnknownFields()
	var cfg Config
	if err := dec.Decode(&cfg); err != nil {
		return nil, err
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return &cfg, nil
}

// Validate checks every field; the error names the field at fault.
func (c *Config) Validate() error {
	seen := map[string]bool{}
	for i := range c.Servers {
		s := &c.Servers[i]
		if err := s.validate(); err != nil {
			return fmt.Errorf("servers[%d]: %w", i, err)
		}
		if seen[s.Name] {
			return fmt.Errorf("servers[%d]: name: %q is used twice", i, s.Name)
		}
		seen[s.Name] = true
	}
	return nil
}

func (s *ServerConfig) validate() error {
	if !identRE.MatchString(s.Name) {
		return fmt.Errorf("name: %q is not a JavaScript identifier", s.Name)
	}
	switch {
	case len(s.Command) > 0 && s.URL != "":
		return fmt.Errorf("server %s: command and url: set one, not both", s.Name)
	case len(s.Command) == 0 && s.URL == "":
		return fmt.Errorf("server %s: command or url is required", s.Name)
	case len(s.Command) > 0 && strings.TrimSpace(s.Command[0]) == "":
		return fmt.Errorf("server %s: command[0]: the program is empty", s.Name)
	case s.URL != "" && !strings.HasPrefix(s.URL, "http://") && !strings.HasPrefix(s.URL, "https://"):
		return fmt.Errorf("server %s: url: %q is not an http or https URL", s.Name, s.URL)
	case s.URL == "" && len(s.Headers) > 0:
		return fmt.Errorf("server %s: headers: only for a url server", s.Name)
	case s.URL != "" && (len(s.Env) > 0 || s.Dir != ""):
		return fmt.Errorf("server %s: env and dir: only for a command server", s.Name)
	}
	if len(s.Tools) == 0 {
		return fmt.Errorf("server %s: tools: the allow-list is required (name each tool the agents may call)", s.Name)
	}
	allowed := map[string]bool{}
	for i, t := range s.Tools {
		if t == "" {
			return fmt.Errorf("server %s: tools[%d]: empty tool name", s.Name, i)
		}
		if allowed[t] {
			return fmt.Errorf("server %s: tools[%d]: %q is listed twice", s.Name, i, t)
		}
		allowed[t] = true
	}
	if len(s.Agents) == 0 {
		return fmt.Errorf("server %s: agents: list the agents that may use these tools", s.Name)
	}
	for i, a := range s.Agents {
		if strings.TrimSpace(a) == "" {
			return fmt.Errorf("server %s: agents[%d]: empty agent slug", s.Name, i)
		}
	}
	for t, e := range s.Effects {
		if !allowed[t] {
			return fmt.Errorf("server %s: effects.%s: not in tools", s.Name, t)
		}
		switch e {
		case runtime.EffectReadOnly, runtime.EffectIdempotent, runtime.EffectEffectful:
		default:
			return fmt.Errorf("server %s: effects.%s: %q is not read-only, idempotent or effectful", s.Name, t, e)
		}
	}
	if _, err := s.callTimeout(); err != nil {
		return err
	}
	return nil
}

func (s *ServerConfig) callTimeout() (time.Duration, error) {
	if s.CallTimeout == "" {
		return 60 * time.Second, nil
	}
	d, err := time.ParseDuration(s.CallTimeout)
	if err != nil || d <= 0 {
		return 0, fmt.Errorf("server %s: call_timeout: %q is not a positive duration like 30s", s.Name, s.CallTimeout)
	}
	return d, nil
}
