package main

import (
	"regexp"
	"strings"
)

// masks are the run-to-run values of the notebooks' outputs: the drift check replaces each match
// with its placeholder in both the committed and the executed output before comparing them. This
// is the one place they are declared; a value a notebook prints that changes from run to run
// either matches one of these or is not printed.
var masks = []struct {
	name        string
	pattern     *regexp.Regexp
	placeholder string
}{
	// Measured rates and durations: "0.65 steps/s", "783 tokens/s", "1.0k tokens/s", "320.9 ms",
	// "1.5s", "46 s". A number directly followed by a time unit (after at most one space) is taken
	// for a measurement; estimated times are masked with them. Assumed throughputs ("27.8 TFLOP/s") are not masked.
	{"rate", regexp.MustCompile(`\d[\d.,]*(e[+-]?\d+)?[kMG]? ?(steps|tokens|examples|bytes|[KMG]iB|GFLOP)/s\b`), "<rate>"},
	{"duration", regexp.MustCompile(`\d[\d.]*(e[+-]?\d+)? ?(ns|µs|us|ms|s|min|h)\b`), "<time>"},
	// Dates and clock times.
	{"date", regexp.MustCompile(`\d{4}-\d{2}-\d{2}([T ]\d{2}:\d{2}(:\d{2}(\.\d+)?)?(Z|[+-]\d{2}:?\d{2})?)?`), "<date>"},
	{"clock", regexp.MustCompile(`\b\d{2}:\d{2}:\d{2}\b`), "<clock>"},
	// Absolute file-system paths (GoNB's temporary folders, the checkout, the plugin), not the
	// scopes of variables ("/block_0/mlp"), which start elsewhere.
	{"path", regexp.MustCompile(`/(tmp|root|home|work|var|usr|opt|private|Users)/[^\s"'<>]*`), "<path>"},
	// GoNB's process ids in its messages.
	{"pid", regexp.MustCompile(`\bpid[ =]\d+`), "pid <n>"},
}

// spaces are runs of blanks: a masked value changes the width of a column, so alignment padding is
// compared as one space.
var spaces = regexp.MustCompile(`[ \t]+`)

// mask returns text with the run-to-run values replaced and blank runs collapsed, line by line,
// without trailing blanks.
func mask(text string) string {
	lines := strings.Split(text, "\n")
	for i, line := range lines {
		for _, m := range masks {
			line = m.pattern.ReplaceAllString(line, m.placeholder)
		}
		lines[i] = strings.TrimRight(spaces.ReplaceAllString(line, " "), " ")
	}
	return strings.Join(lines, "\n")
}
