package main

import (
	"math"
	"os"
	"strings"
	"testing"
)

// TestRunLearns: five steps of the README's run lower the tiny GPT's loss from 5.83 (the untrained
// model's on the text, as onegpu train's first step prints it) by more than 10%.
func TestRunLearns(t *testing.T) {
	h := run(5)
	first, last := h.Steps[0].Loss, h.Steps[len(h.Steps)-1].Loss
	if len(h.Steps) != 5 || math.Abs(first-5.83) > 0.05 || !(last < 0.9*first) {
		t.Errorf("%d steps, loss %.4f -> %.4f; want 5 steps from about 5.83 to below %.4f", len(h.Steps), first, last, 0.9*first)
	}
}

// TestREADMEShowsRun: the README's Go example is this program's code, line for line (indentation
// aside), so that the README's example compiles and runs as shown.
func TestREADMEShowsRun(t *testing.T) {
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	source, err := os.ReadFile("main.go")
	if err != nil {
		t.Fatal(err)
	}
	_, block, ok := strings.Cut(string(readme), "```go\n")
	block, _, closed := strings.Cut(block, "```")
	if !ok || !closed {
		t.Fatal("README.md has no ```go block: its library example is this program's run function")
	}
	lines := strings.Split(string(source), "\n")
	at := 0
	for _, want := range strings.Split(strings.TrimSpace(block), "\n") {
		want = strings.TrimSpace(want)
		for at < len(lines) && strings.TrimSpace(lines[at]) != want {
			at++
		}
		if at == len(lines) {
			t.Fatalf("README.md's example line %q is not in main.go (in order): update one or the other", want)
		}
	}
}
