package figure

import (
	"bytes"
	"image/png"
	"strings"
	"testing"
)

func TestTable(t *testing.T) {
	got := Table([]string{"name", "bytes"}, [][]string{{"a<b", "1"}, {"c", "2"}})
	for _, want := range []string{"<th>name</th><th>bytes</th>", "<td>a&lt;b</td><td>1</td>", "<td>c</td><td>2</td>"} {
		if !strings.Contains(got, want) {
			t.Errorf("Table = %q, want it to contain %q", got, want)
		}
	}
}

func TestCharts(t *testing.T) {
	chart := Chart{Title: "t", XLabel: "x", YLabel: "y", YFromZero: true}
	bars, err := Bars(chart, []string{"a", "b", "c"}, Bar{"one", []float64{1, 2, 3}}, Bar{"two", []float64{3, 2, 1}})
	if err != nil {
		t.Fatal(err)
	}
	lines, err := Lines(chart, Series{Name: "line", X: []float64{1, 2}, Y: []float64{2, 1}},
		Series{Name: "dots", X: []float64{1}, Y: []float64{3}, Dots: true}, Series{Name: "limit", X: []float64{0, 2}, Y: []float64{2, 2}, Dashed: true})
	if err != nil {
		t.Fatal(err)
	}
	for name, data := range map[string][]byte{"bars": bars, "lines": lines} {
		img, err := png.Decode(bytes.NewReader(data))
		if err != nil {
			t.Fatalf("%s: not a PNG: %v", name, err)
		}
		if b := img.Bounds(); b.Dx() < 100 || b.Dy() < 100 {
			t.Errorf("%s: %v pixels", name, b)
		}
	}
	if _, err := Bars(chart, []string{"a"}, Bar{"short", []float64{1, 2}}); err == nil {
		t.Error("Bars accepted 2 values for 1 label")
	}
	if _, err := Lines(chart, Series{Name: "ragged", X: []float64{1, 2}, Y: []float64{1}}); err == nil {
		t.Error("Lines accepted 2 x and 1 y values")
	}
}
