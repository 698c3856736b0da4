package main

import (
	"flag"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
)

// envName is the variable that sets a flag: CAIRN_ and the flag's name in
// upper case with - as _ (--member-ttl: CAIRN_MEMBER_TTL).
func envName(flagName string) string {
	return "CAIRN_" + strings.ToUpper(strings.ReplaceAll(flagName, "-", "_"))
}

// parseFlags parses args, then sets each of the named flags that the
// command line left unset from its variable (envName), so precedence is
// the command line, then the environment, then a configuration file
// (applyConfig, which skips whatever is set by now), then the defaults. A
// value that does not parse is an error naming the variable: a typo in a
// deployment's environment must stop the node, not fall back to a default.
func parseFlags(fs *flag.FlagSet, args []string, fromEnv ...string) error {
	if err := fs.Parse(args); err != nil {
		return err
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	for _, name := range fromEnv {
		if fs.Lookup(name) == nil {
			return envError{fmt.Errorf("flag %q is not defined (a mistake in this program)", name)}
		}
		v, ok := os.LookupEnv(envName(name))
		if !ok || v == "" || set[name] {
			continue
		}
		if err := fs.Set(name, v); err != nil {
			if strings.Contains(err.Error(), strconv.Quote(v)) { // the flag's own error names the value and what it wants
				return envError{fmt.Errorf("%s: %w", envName(name), err)}
			}
			kind, _ := flag.UnquoteUsage(fs.Lookup(name))
			if kind == "" || kind == "value" {
				kind = "value of --" + name
			}
			return envError{fmt.Errorf("%s=%q: %w (want a %s)", envName(name), v, err, kind)}
		}
	}
	return nil
}

// envError is a variable whose value does not parse (the flag package
// prints its own errors, of the command line, itself).
type envError struct{ err error }

func (e envError) Error() string { return e.err.Error() }
func (e envError) Unwrap() error { return e.err }

// parseFailed reports a command line or environment that does not parse,
// with the exit code 2.
func parseFailed(stderr io.Writer, cmd string, err error) int {
	if _, ok := err.(envError); ok {
		fmt.Fprintf(stderr, "%s: %v\n", cmd, err)
	}
	return 2
}
