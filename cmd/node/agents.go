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
// versions: agents ls | agents show AGENT VERSION | agents upgrade AGENT
// (or --run RUN) [--dry-run].
func agentsCmd(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("agents", flag.ContinueOnError)
	fs.SetOutput(stderr)
	apiURL := fs.String("api", "http://127.0.0.1:8700", "node API URL")
	token := fs.String("token", "", "bearer token")
	asJSON := fs.Bool("json", false, "print JSON")
	dryRun := fs.Bool("dry-run", false, "upgrade: list what would move and what would be refused; write nothing")
	run := fs.String("run", "", "upgrade: move this run alone (AGENT is then not given)")
	if len(args) == 0 {
		fmt.Fprintln(stderr, "node agents: want ls, show AGENT VERSION, or upgrade AGENT|--run RUN")
		return 2
	}
	verb := args[0]
	// Flags may follow the arguments (agents upgrade writer --dry-run):
	// the flag package stops at the first argument, so parse what
	// follows each one again.
	var pos []string
	for rest := args[1:]; ; {
		if err := fs.Parse(rest); err != nil {
			return parseFailed(stderr, "node agents", err)
		}
		if fs.NArg() == 0 {
			break
		}
		pos, rest = append(pos, fs.Arg(0)), fs.Args()[1:]
	}
	if err := parseFlags(fs, nil, "api", "token"); err != nil {
		return parseFailed(stderr, "node agents", err)
	}
	_ = fs.Parse(pos) // the arguments alone, for fs.Arg: no flag among them
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
	case "upgrade":
		body := strings.NewReader(fmt.Sprintf(`{"dry_run":%t}`, *dryRun))
		if *run != "" {
			if fs.NArg() != 0 {
				fmt.Fprintln(stderr, "node agents upgrade: --run RUN, or AGENT: not both")
				return 2
			}
			var out map[string]any
			if err = c.do("POST", "/v1/runs/"+url.PathEscape(*run)+"/upgrade", body, &out); err == nil {
				if *asJSON {
					return printJSON(stdout, out)
				}
				verb := "moves"
				if *dryRun {
					verb = "would move"
				}
				fmt.Fprintf(stdout, "%v %s from %s to %s at its next model boundary\n", out["run_id"], verb,
					definition.Short(fmt.Sprint(out["from"])), definition.Short(fmt.Sprint(out["to"])))
			}
			break
		}
		if fs.NArg() != 1 {
			fmt.Fprintln(stderr, "node agents upgrade: want AGENT, or --run RUN")
			return 2
		}
		var out struct {
			To    string `json:"to"`
			Moved []struct {
				RunID string `json:"run_id"`
				From  string `json:"from"`
			} `json:"moved"`
			Refused []struct {
				RunID   string `json:"run_id"`
				Refused string `json:"refused"`
			} `json:"refused"`
		}
		if err = c.do("POST", "/v1/agents/"+url.PathEscape(fs.Arg(0))+"/upgrade", body, &out); err != nil {
			break
		}
		if *asJSON {
			return printJSON(stdout, out)
		}
		verb := "moves"
		if *dryRun {
			verb = "would move"
		}
		for _, m := range out.Moved {
			fmt.Fprintf(stdout, "%s %s from %s to %s at its next model boundary\n", m.RunID, verb, definition.Short(m.From), definition.Short(out.To))
		}
		for _, r := range out.Refused {
			fmt.Fprintf(stdout, "%s refused: %s\n", r.RunID, r.Refused)
		}
		fmt.Fprintf(stdout, "%d %s, %d refused\n", len(out.Moved), verb, len(out.Refused))
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
