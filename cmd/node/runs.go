package main

import (
	"bufio"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"
)

// runsCmd talks to a serving node: runs ls | show RUN | tail RUN | cancel RUN.
func runsCmd(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("runs", flag.ContinueOnError)
	fs.SetOutput(stderr)
	apiURL := fs.String("api", env("CAIRN_API", "http://127.0.0.1:8700"), "node API URL")
	token := fs.String("token", env("CAIRN_TOKEN", ""), "bearer token")
	asJSON := fs.Bool("json", false, "print JSON")
	if len(args) == 0 {
		fmt.Fprintln(stderr, "node runs: want ls, show RUN, tail RUN or cancel RUN")
		return 2
	}
	verb := args[0]
	if err := fs.Parse(args[1:]); err != nil {
		return 2
	}
	c := &client{base: strings.TrimRight(*apiURL, "/"), token: *token, http: &http.Client{}}
	arg := func() (string, bool) {
		if fs.NArg() != 1 {
			fmt.Fprintf(stderr, "node runs %s: want one RUN\n", verb)
			return "", false
		}
		return fs.Arg(0), true
	}
	var err error
	switch verb {
	case "ls":
		var out struct {
			Runs []map[string]any `json:"runs"`
		}
		if err = c.do("GET", "/v1/runs", nil, &out); err == nil {
			if *asJSON {
				return printJSON(stdout, out)
			}
			for _, r := range out.Runs {
				fmt.Fprintf(stdout, "%-24v %-12v %-10v %v\n", r["run_id"], r["agent"], r["status"], r["created"])
			}
		}
	case "show":
		id, ok := arg()
		if !ok {
			return 2
		}
		var out map[string]any
		if err = c.do("GET", "/v1/runs/"+id, nil, &out); err == nil {
			return printJSON(stdout, out)
		}
	case "cancel":
		id, ok := arg()
		if !ok {
			return 2
		}
		var out map[string]any
		if err = c.do("POST", "/v1/runs/"+id+"/cancel", strings.NewReader("{}"), &out); err == nil {
			fmt.Fprintf(stdout, "%v %v\n", out["run_id"], out["status"])
		}
	case "tail":
		id, ok := arg()
		if !ok {
			return 2
		}
		err = c.tail(id, stdout, *asJSON)
	default:
		fmt.Fprintf(stderr, "node runs: unknown verb %q\n", verb)
		return 2
	}
	if err != nil {
		fmt.Fprintln(stderr, "node runs:", err)
		return 1
	}
	return 0
}

func printJSON(w io.Writer, v any) int {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	if err := enc.Encode(v); err != nil {
		return 1
	}
	return 0
}

type client struct {
	base, token string
	http        *http.Client
}

func (c *client) request(method, path string, body io.Reader) (*http.Response, error) {
	req, err := http.NewRequest(method, c.base+path, body)
	if err != nil {
		return nil, err
	}
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	return c.http.Do(req)
}

func (c *client) do(method, path string, body io.Reader, out any) error {
	resp, err := c.request(method, path, body)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode >= 300 {
		var e struct {
			Error struct{ Code, Message string } `json:"error"`
		}
		_ = json.NewDecoder(resp.Body).Decode(&e)
		return fmt.Errorf("%s %s: %d %s: %s", method, path, resp.StatusCode, e.Error.Code, e.Error.Message)
	}
	return json.NewDecoder(resp.Body).Decode(out)
}

// tail prints a run's events as they are committed.
func (c *client) tail(id string, w io.Writer, raw bool) error {
	resp, err := c.request("GET", "/v1/runs/"+id+"/events", nil)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("tail %s: %s", id, resp.Status)
	}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(nil, 16<<20)
	event := ""
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, "event: "):
			event = strings.TrimPrefix(line, "event: ")
		case strings.HasPrefix(line, "data: "):
			data := strings.TrimPrefix(line, "data: ")
			if raw {
				fmt.Fprintln(w, data)
				continue
			}
			var e struct {
				Revision int64     `json:"revision"`
				Time     time.Time `json:"time"`
			}
			_ = json.Unmarshal([]byte(data), &e)
			if event != "end" {
				fmt.Fprintf(w, "%s  rev %-3d %s\n", e.Time.Format("15:04:05.000"), e.Revision, event)
			}
		}
	}
	return sc.Err()
}
