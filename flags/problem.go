package flags

import "strings"

// Problem is one thing XLA would do with a flag that the user did not mean: abort the process,
// drop the flag silently, or (for a warning) accept a flag that does nothing.
type Problem struct {
	// Flag is the flag's name without dashes, or the text in question when it has no name.
	Flag string `json:"flag"`
	// Build is the XLA build the verdict is for; empty when every build behaves the same.
	Build Build `json:"build,omitempty"`
	// Message says what XLA would do and why.
	Message string `json:"message"`
	// Fix says what to write instead; empty when there is nothing better to write.
	Fix string `json:"fix,omitempty"`
}

// Error formats the problem as one line: flag, build, message and fix.
func (p Problem) Error() string {
	var s strings.Builder
	s.WriteString(p.Flag)
	if p.Build != "" {
		s.WriteString(" (" + string(p.Build) + ")")
	}
	s.WriteString(": " + p.Message)
	if p.Fix != "" {
		s.WriteString("; fix: " + p.Fix)
	}
	return s.String()
}

// Problems is the error returned when XLA would reject flags or drop some silently. It lists
// every problem found, not only the first.
type Problems []Problem

// Error lists the problems, one per line.
func (ps Problems) Error() string {
	lines := make([]string, len(ps))
	for i, p := range ps {
		lines[i] = p.Error()
	}
	return strings.Join(lines, "\n")
}

// errorOf returns ps as an error, or nil when there are none.
func errorOf(ps []Problem) error {
	if len(ps) == 0 {
		return nil
	}
	return Problems(ps)
}
