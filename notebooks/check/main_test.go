package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestCheck(t *testing.T) {
	const ok = `{"cells": [
		{"cell_type": "markdown", "source": ["# title"]},
		{"cell_type": "code", "execution_count": 1, "source": ["!*go mod edit"], "outputs": []},
		{"cell_type": "code", "execution_count": 2, "source": "%%\nfmt.Println(1)", "outputs": [
			{"output_type": "stream", "name": "stdout", "text": ["1\n", "exit status is fine inside a sentence\n"]},
			{"output_type": "display_data", "data": {"image/png": "iVBOR", "text/plain": ["<image>"]}}]},
		{"cell_type": "code", "execution_count": null, "source": [""], "outputs": []}]}`
	for _, tc := range []struct {
		name, notebook string
		want           []string // substrings of the problems, in order; none for a clean notebook
	}{
		{"clean", ok, nil},
		{"failing shell line", strings.Replace(ok, `"1\n"`, `"go: no such tool\n", "exit status 1\n"`, 1),
			[]string{`code cell 2: output line "exit status 1"`}},
		{"panic on stderr", strings.Replace(ok, `"outputs": []},`, `"outputs": [{"output_type": "stream", "name": "stderr", "text": "panic: boom\n\ngoroutine 1"}]},`, 1),
			[]string{`code cell 1: output line "panic: boom"`}},
		{"error output", strings.Replace(ok, `"outputs": []},`, `"outputs": [{"output_type": "error", "ename": "ERROR", "evalue": "failed to run\nmore", "traceback": []}]},`, 1),
			[]string{"code cell 1: error output ERROR: failed to run"}},
		{"gonb error in a result", strings.Replace(ok, `"<image>"`, `"ERROR: failed to run \"go build\""`, 1),
			[]string{`code cell 2: output line "ERROR: failed to run \"go build\""`}},
		{"not executed", strings.Replace(ok, `"execution_count": 1`, `"execution_count": null`, 1),
			[]string{"code cell 1: not executed"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			problems, err := check([]byte(tc.notebook))
			if err != nil {
				t.Fatal(err)
			}
			wantProblems(t, problems, tc.want)
		})
	}
}

func TestCheckRejectsNonNotebooks(t *testing.T) {
	for _, data := range []string{"", "{}", `{"cells": []}`, `{"cells": [{"cell_type": "markdown", "source": "x"}]}`, "not json"} {
		if _, err := check([]byte(data)); err == nil {
			t.Errorf("check(%q) accepted it", data)
		}
	}
}

// wantProblems fails t unless problems are as many as want and each contains its want.
func wantProblems(t *testing.T, problems, want []string) {
	t.Helper()
	if len(problems) != len(want) {
		t.Fatalf("problems %q, want %d matching %q", problems, len(want), want)
	}
	for i, w := range want {
		if !strings.Contains(problems[i], w) {
			t.Errorf("problem %d is %q, want it to contain %q", i, problems[i], w)
		}
	}
}

func TestCheckCellLength(t *testing.T) {
	cell := func(lines int) string {
		return `{"cell_type": "code", "execution_count": 1, "source": ` + jsonString(strings.Repeat("x := 1\n", lines)) + `, "outputs": []}`
	}
	nb := `{"cells": [` + cell(MaxCellLines) + `, ` + cell(MaxCellLines+1) + `]}`
	problems, err := check([]byte(nb))
	if err != nil {
		t.Fatal(err)
	}
	wantProblems(t, problems, []string{"code cell 2: 41 lines, over the 40"})
}

// TestCommittedNotebooks runs the check on the committed notebooks, which hold the outputs of their
// last run: a cell over MaxCellLines, or a committed failure, fails go test ./... without Jupyter.
func TestCommittedNotebooks(t *testing.T) {
	paths, err := filepath.Glob(filepath.Join("..", "[0-9]*.ipynb"))
	if err != nil || len(paths) == 0 {
		t.Fatalf("no committed notebooks in ../ (%v)", err)
	}
	for _, path := range paths {
		data, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		problems, err := check(data)
		if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		for _, p := range problems {
			t.Errorf("%s: %s", path, p)
		}
	}
}

func jsonString(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}
