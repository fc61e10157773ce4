package main

import (
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
