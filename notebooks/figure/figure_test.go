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
	checkPNGs(t, map[string][]byte{"bars": bars, "lines": lines})
	if _, err := Bars(chart, []string{"a"}, Bar{"short", []float64{1, 2}}); err == nil {
		t.Error("Bars accepted 2 values for 1 label")
	}
	if _, err := Lines(chart, Series{Name: "ragged", X: []float64{1, 2}, Y: []float64{1}}); err == nil {
		t.Error("Lines accepted 2 x and 1 y values")
	}
}

func TestStackedAndGrid(t *testing.T) {
	chart := Chart{Title: "t", YLabel: "GiB", YFromZero: true}
	stacked, err := Stacked(chart, []string{"a", "b"}, []Bar{{"base", []float64{1, 2}}, {"none", []float64{0, 0}}, {"top", []float64{3, 1}}},
		Bar{"published", []float64{4, 0}})
	if err != nil {
		t.Fatal(err)
	}
	grid, err := Grid(Chart{Title: "mask"}, [][]int{{1, 0, 0}, {1, 1, 0}, {0, 0, 2}}, "first", "second")
	if err != nil {
		t.Fatal(err)
	}
	checkPNGs(t, map[string][]byte{"stacked": stacked, "grid": grid})
	if _, err := Stacked(chart, []string{"a"}, []Bar{{"short", []float64{1, 2}}}); err == nil {
		t.Error("Stacked accepted 2 values for 1 label")
	}
	if _, err := Grid(chart, [][]int{{1, 2}, {1}}); err == nil {
		t.Error("Grid accepted a ragged grid")
	}
}

// checkPNGs fails unless each chart decodes as a PNG of at least 100×100 pixels.
func checkPNGs(t *testing.T, charts map[string][]byte) {
	t.Helper()
	for name, data := range charts {
		img, err := png.Decode(bytes.NewReader(data))
		if err != nil {
			t.Fatalf("%s: not a PNG: %v", name, err)
		}
		if b := img.Bounds(); b.Dx() < 100 || b.Dy() < 100 {
			t.Errorf("%s: %v pixels", name, b)
		}
	}
}
