// Command check reads notebooks executed by jupyter nbconvert and fails when one of them shows a failure
// that nbconvert itself lets pass or, with -committed, when its outputs drifted from the committed ones.
//
//	go run ./notebooks/check -committed notebooks out/notebooks/*.ipynb
//
// nbconvert stops with an error when a Go cell fails to compile, panics or times out, but GoNB reports a
// failing shell line (`!cmd`, `!*cmd`) only by printing "exit status N", and a notebook written with
// --allow-errors keeps error outputs. So a notebook fails the check when a code cell was not executed,
// when an output is an error, or when an output's text has a line that is "exit status N" or starts with
// "panic: ", "fatal error: " or GoNB's "ERROR: ". A code cell over 40 lines fails it too: the notebooks
// keep each step short enough to read on one screen (TestCommittedNotebooks checks the committed
// notebooks in go test ./..., without Jupyter).
//
// With -committed DIR, each executed notebook is also compared with DIR's notebook of the same name,
// the one it was executed from: a code cell whose outputs differ, after the run-to-run values
// declared in masks.go are masked, fails the check (notebooks/run --update rewrites the committed
// outputs from an execution).
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
)

func main() {
	committed := flag.String("committed", "", "folder of the committed notebooks the executed ones must match (masked)")
	flag.Usage = func() {
		fmt.Fprintln(os.Stderr, "usage: check [-committed DIR] EXECUTED.ipynb...")
		flag.PrintDefaults()
	}
	flag.Parse()
	if flag.NArg() < 1 {
		flag.Usage()
		os.Exit(2)
	}
	failed := false
	for _, path := range flag.Args() {
		data, err := os.ReadFile(path)
		if err == nil {
			var problems []string
			if problems, err = check(data); err == nil && *committed != "" {
				var original []byte
				if original, err = os.ReadFile(filepath.Join(*committed, filepath.Base(path))); err == nil {
					var drifted []string
					if drifted, err = drift(original, data); len(drifted) > 0 {
						problems = append(problems, drifted...)
						problems = append(problems, "outputs drifted from the committed ones: if the change is meant, run notebooks/run --update and commit the notebook")
					}
				}
			}
			if err == nil {
				for _, p := range problems {
					fmt.Printf("%s: %s\n", path, p)
				}
				failed = failed || len(problems) > 0
				if len(problems) == 0 {
					fmt.Printf("%s: ok\n", path)
				}
				continue
			}
		}
		fmt.Printf("%s: %v\n", path, err)
		failed = true
	}
	if failed {
		os.Exit(1)
	}
}

// notebook is the part of the .ipynb format the check reads.
type notebook struct {
	Cells []cell `json:"cells"`
}

type cell struct {
	Type           string   `json:"cell_type"`
	Source         text     `json:"source"`
	ExecutionCount *int     `json:"execution_count"`
	Outputs        []output `json:"outputs"`
}

func unmarshalNotebook(data []byte, nb *notebook) error {
	if err := json.Unmarshal(data, nb); err != nil {
		return fmt.Errorf("not a notebook: %w", err)
	}
	if len(nb.Cells) == 0 {
		return fmt.Errorf("not a notebook: no cells")
	}
	return nil
}

type output struct {
	Type  string          `json:"output_type"`
	Name  string          `json:"name"`  // stream: stdout or stderr
	Text  text            `json:"text"`  // stream
	Data  map[string]text `json:"data"`  // display_data, execute_result
	Error string          `json:"ename"` // error
	Value string          `json:"evalue"`
}

// text is a multi-line string, which the format writes either as one string or as a list of lines.
type text string

func (t *text) UnmarshalJSON(b []byte) error {
	var lines []string
	if err := json.Unmarshal(b, &lines); err == nil {
		*t = text(strings.Join(lines, ""))
		return nil
	}
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return err
	}
	*t = text(s)
	return nil
}

// MaxCellLines is the most lines a code cell may have.
const MaxCellLines = 40

var failureLine = regexp.MustCompile(`^(exit status \d+|panic: .*|fatal error: .*|ERROR: .*)$`)

// check returns the failures an executed notebook shows, one line each, or an error when it is not a notebook.
func check(data []byte) ([]string, error) {
	var nb notebook
	if err := unmarshalNotebook(data, &nb); err != nil {
		return nil, err
	}
	var problems []string
	code := 0
	for _, c := range nb.Cells {
		if c.Type != "code" {
			continue
		}
		code++
		where := fmt.Sprintf("code cell %d", code)
		if n := len(strings.Split(strings.TrimRight(string(c.Source), "\n"), "\n")); n > MaxCellLines {
			problems = append(problems, fmt.Sprintf("%s: %d lines, over the %d a cell may have: split it or move code into a package", where, n, MaxCellLines))
		}
		if c.ExecutionCount == nil && strings.TrimSpace(string(c.Source)) != "" {
			problems = append(problems, where+": not executed")
		}
		for _, o := range c.Outputs {
			if o.Type == "error" {
				problems = append(problems, fmt.Sprintf("%s: error output %s: %s", where, o.Error, firstLine(o.Value)))
				continue
			}
			texts := []text{o.Text, o.Data["text/plain"]}
			for _, t := range texts {
				for _, line := range strings.Split(string(t), "\n") {
					if line = strings.TrimSpace(line); failureLine.MatchString(line) {
						problems = append(problems, fmt.Sprintf("%s: output line %q", where, line))
					}
				}
			}
		}
	}
	if code == 0 {
		return nil, fmt.Errorf("not a notebook: no code cells")
	}
	return problems, nil
}

func firstLine(s string) string {
	line, _, _ := strings.Cut(s, "\n")
	return line
}
