package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"strings"

	"github.com/goccy/go-yaml"
)

// applyConfig sets, from a YAML or JSON file of flag names to values, every
// flag that neither the command line nor its CAIRN_* variable set:
// precedence is flags, then environment, then the file, then defaults.
func applyConfig(fs *flag.FlagSet, path string) error {
	raw, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("config: %w", err)
	}
	js := raw
	if !strings.HasSuffix(path, ".json") {
		if js, err = yaml.YAMLToJSON(raw); err != nil {
			return fmt.Errorf("config %s: %w", path, err)
		}
	}
	var values map[string]any
	if err := json.Unmarshal(js, &values); err != nil {
		return fmt.Errorf("config %s: %w", path, err)
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	for name, v := range values {
		f := fs.Lookup(name)
		if f == nil || name == "config" {
			return fmt.Errorf("config %s: unknown setting %q", path, name)
		}
		if set[name] { // by the command line or its CAIRN_* variable (parseFlags)
			continue
		}
		if err := fs.Set(name, fmt.Sprint(v)); err != nil {
			return fmt.Errorf("config %s: %s: %w", path, name, err)
		}
	}
	return nil
}
