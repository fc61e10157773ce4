package main

import (
	"strings"
	"testing"
)

func TestMask(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"step time 320.9 ms", "step time <time>"},
		{"first step 1.5s (builds and compiles the step)", "first step <time> (builds and compiles the step)"},
		{"0.65 steps/s, 670 tokens/s", "<rate>, <rate>"},
		{"0.98 steps/s, 1.0k tokens/s", "<rate>, <rate>"},
		{"grid estimated and timed in 46 s", "grid estimated and timed in <time>"},
		{"written 2026-12-03T13:47:38Z to /tmp/gonb_1234/x.go", "written <date> to <path>"},
		{"float32  none   1     23.2 MiB     0.420s no", "float32 none 1 23.2 MiB <time> no"},
		// What stays: sizes, counts, scopes, losses, assumed throughputs.
		{"/block_0/mlp  4 micro-batches, loss 4.8270721, 27.8 TFLOP/s, 2 layers", "/block_0/mlp 4 micro-batches, loss 4.8270721, 27.8 TFLOP/s, 2 layers"},
	} {
		if got := mask(tc.in); got != tc.want {
			t.Errorf("mask(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

func TestDrift(t *testing.T) {
	const committed = `{"cells": [
		{"cell_type": "markdown", "source": ["# title"]},
		{"cell_type": "code", "execution_count": 1, "source": "%%\nrun()", "outputs": [
			{"output_type": "stream", "name": "stdout", "text": ["loss 4.8270721\n", "step time   320.9 ms  ok\n"]},
			{"output_type": "display_data", "data": {"image/png": "iVBORw0KGgo", "text/plain": ["<image>"]}},
			{"output_type": "display_data", "data": {"text/html": ["<td>23.18 MiB</td>"]}}]}]}`
	for _, tc := range []struct {
		name, executed string
		want           []string // substrings of the problems, in order
	}{
		{"identical", committed, nil},
		{"timings and column widths", strings.Replace(committed, `"step time   320.9 ms  ok\n"`, `"step time 1020.4 ms ok\n"`, 1), nil},
		{"stream split differently", strings.Replace(committed, `["loss 4.8270721\n", "step time   320.9 ms  ok\n"]`,
			`["loss 4.82", "70721\nstep time   320.9 ms  ok\n"]`, 1), nil},
		{"other pixels", strings.Replace(committed, "iVBORw0KGgo", "iVBORw0KGgX", 1), nil},
		{"a changed loss", strings.Replace(committed, "4.8270721", "4.8270698", 1),
			[]string{`code cell 1: stdout differs at line 1: committed "loss 4.8270721", executed "loss 4.8270698"`}},
		{"a changed table", strings.Replace(committed, "23.18 MiB", "0.0 MiB", 1),
			[]string{"code cell 1: displayed result 2 differs at line 2"}},
		{"a missing chart", strings.Replace(committed, `{"output_type": "display_data", "data": {"image/png": "iVBORw0KGgo", "text/plain": ["<image>"]}},`, "", 1),
			[]string{"code cell 1: 2 displayed results committed, 1 executed"}},
		{"a new stderr line", strings.Replace(committed, `"outputs": [`, `"outputs": [{"output_type": "stream", "name": "stderr", "text": "warning\n"},`, 1),
			[]string{`code cell 1: stderr differs at line 1: committed "", executed "warning"`}},
		{"another source", strings.Replace(committed, "run()", "run(2)", 1), []string{"code cell 1: its source differs"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			problems, err := drift([]byte(committed), []byte(tc.executed))
			if err != nil {
				t.Fatal(err)
			}
			wantProblems(t, problems, tc.want)
		})
	}
}
