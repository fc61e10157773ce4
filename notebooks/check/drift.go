package main

import (
	"fmt"
	"slices"
	"strings"
)

// cellOutputs is what the drift check compares of one code cell: its stdout and its stderr, each
// concatenated (GoNB flushes a stream in chunks whose boundaries vary from run to run, and the two
// streams interleave as they arrive), and its displayed results in order, each by its MIME types
// and its text. Images are compared by their presence only: their pixels are not text, and a
// chart's key numbers are printed beside it.
type cellOutputs struct {
	stdout, stderr string
	displays       []string
}

func outputsOf(outputs []output) cellOutputs {
	var c cellOutputs
	var stdout, stderr strings.Builder
	for _, o := range outputs {
		switch {
		case o.Type == "stream" && o.Name == "stderr":
			stderr.WriteString(string(o.Text))
		case o.Type == "stream":
			stdout.WriteString(string(o.Text))
		case o.Type == "error":
			c.displays = append(c.displays, "error "+o.Error+": "+mask(o.Value))
		default:
			var kinds []string
			for kind := range o.Data {
				kinds = append(kinds, kind)
			}
			slices.Sort(kinds)
			var b strings.Builder
			for _, kind := range kinds {
				b.WriteString("[" + kind + "]")
				if strings.HasPrefix(kind, "text/") {
					b.WriteString("\n" + mask(string(o.Data[kind])) + "\n")
				}
			}
			c.displays = append(c.displays, b.String())
		}
	}
	c.stdout, c.stderr = mask(stdout.String()), mask(stderr.String())
	return c
}

// drift compares an executed notebook with the committed one it was executed from, cell by cell,
// and returns one line per code cell whose outputs differ other than in masked values.
func drift(committed, executed []byte) ([]string, error) {
	var before, after notebook
	if err := unmarshalNotebook(committed, &before); err != nil {
		return nil, fmt.Errorf("committed notebook: %w", err)
	}
	if err := unmarshalNotebook(executed, &after); err != nil {
		return nil, fmt.Errorf("executed notebook: %w", err)
	}
	was, is := codeCells(before), codeCells(after)
	if len(was) != len(is) {
		return []string{fmt.Sprintf("%d code cells committed, %d executed: not executed from the committed notebook", len(was), len(is))}, nil
	}
	var problems []string
	for i := range was {
		if was[i].Source != is[i].Source {
			problems = append(problems, fmt.Sprintf("code cell %d: its source differs from the committed one", i+1))
			continue
		}
		a, b := outputsOf(was[i].Outputs), outputsOf(is[i].Outputs)
		where := fmt.Sprintf("code cell %d", i+1)
		if d := firstDifference(a.stdout, b.stdout); d != "" {
			problems = append(problems, where+": stdout "+d)
		}
		if d := firstDifference(a.stderr, b.stderr); d != "" {
			problems = append(problems, where+": stderr "+d)
		}
		if len(a.displays) != len(b.displays) {
			problems = append(problems, fmt.Sprintf("%s: %d displayed results committed, %d executed", where, len(a.displays), len(b.displays)))
			continue
		}
		for j := range a.displays {
			if d := firstDifference(a.displays[j], b.displays[j]); d != "" {
				problems = append(problems, fmt.Sprintf("%s: displayed result %d %s", where, j+1, d))
			}
		}
	}
	return problems, nil
}

func codeCells(nb notebook) []cell {
	var cells []cell
	for _, c := range nb.Cells {
		if c.Type == "code" {
			cells = append(cells, c)
		}
	}
	return cells
}

// firstDifference describes the first line where two masked texts differ, or returns "".
func firstDifference(committed, executed string) string {
	if committed == executed {
		return ""
	}
	a, b := strings.Split(committed, "\n"), strings.Split(executed, "\n")
	for i := range max(len(a), len(b)) {
		var x, y string
		if i < len(a) {
			x = a[i]
		}
		if i < len(b) {
			y = b[i]
		}
		if x != y {
			return fmt.Sprintf("differs at line %d: committed %q, executed %q", i+1, clip(x), clip(y))
		}
	}
	return "differs"
}

func clip(s string) string {
	if len(s) > 160 {
		return s[:160] + "..."
	}
	return s
}
