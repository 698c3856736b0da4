package main

import (
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"

	"github.com/cairn-agents/cairn/actors/definition"
)

// agentsCmd talks to a serving node about its agents' definition
// versions: agents ls | agents show AGENT VERSION.
func agentsCmd(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("agents", flag.ContinueOnError)
	fs.SetOutput(stderr)
	apiURL := fs.String("api", "http://127.0.0.1:8700", "node API URL")
	token := fs.String("token", "", "bearer token")
	asJSON := fs.Bool("json", false, "print JSON")
	if len(args) == 0 {
		fmt.Fprintln(stderr, "node agents: want ls, or show AGENT VERSION")
		return 2
	}
	verb := args[0]
	if err := parseFlags(fs, args[1:], "api", "token"); err != nil {
		return parseFailed(stderr, "node agents", err)
	}
	c := &client{base: strings.TrimRight(*apiURL, "/"), token: *token, http: &http.Client{}}
	var err error
	switch verb {
	case "ls":
		var out struct {
			Agents []struct {
				Slug     string `json:"slug"`
				Deployed bool   `json:"deployed"`
				Version  string `json:"version"`
				Versions []struct {
					Version string `json:"version"`
					Current bool   `json:"current"`
					Active  int    `json:"active"`
					Kept    int    `json:"kept"`
				} `json:"versions"`
			} `json:"agents"`
		}
		if err = c.do("GET", "/v1/agents", nil, &out); err != nil {
			break
		}
		if *asJSON {
			return printJSON(stdout, out)
		}
		fmt.Fprintf(stdout, "%-20s %-14s %-8s %8s %8s\n", "AGENT", "VERSION", "", "IN FLIGHT", "KEPT")
		for _, a := range out.Agents {
			for _, v := range a.Versions {
				mark := ""
				switch {
				case v.Current:
					mark = "current"
				case v.Version == "":
					mark = "unpinned" // runs of an earlier build
				case a.Deployed:
					mark = "older"
				default:
					mark = "removed"
				}
				fmt.Fprintf(stdout, "%-20s %-14s %-8s %8d %8d\n", a.Slug, orDash(definition.Short(v.Version)), mark, v.Active, v.Kept)
			}
		}
	case "show":
		if fs.NArg() != 2 {
			fmt.Fprintln(stderr, "node agents show: want AGENT VERSION (the full version, as agents ls --json or runs show print it)")
			return 2
		}
		var out map[string]any
		if err = c.do("GET", "/v1/agents/"+url.PathEscape(fs.Arg(0))+"/versions/"+url.PathEscape(fs.Arg(1)), nil, &out); err == nil {
			return printJSON(stdout, out)
		}
	default:
		fmt.Fprintf(stderr, "node agents: unknown verb %q\n", verb)
		return 2
	}
	if err != nil {
		fmt.Fprintln(stderr, "node agents:", err)
		return 1
	}
	return 0
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
