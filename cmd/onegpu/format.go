package main

import (
	"fmt"
	"strings"
)

// humanCount formats a count with decimal units (k, M, G, T), as FLOP counts are quoted.
func humanCount(n int64) string {
	value, exp := float64(n), 0
	for value >= 1000 && exp < 4 {
		value /= 1000
		exp++
	}
	if exp == 0 {
		return fmt.Sprintf("%d", n)
	}
	return fmt.Sprintf("%.1f %c", value, "kMGT"[exp-1])
}

// groupDigits writes n with thousands separators: 155,877,376.
func groupDigits(n int64) string {
	s := fmt.Sprintf("%d", n)
	var b strings.Builder
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 && s[i-1] != '-' {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	return b.String()
}

// sparkline draws values as width block characters, each the maximum of its share of the values.
func sparkline(values []int64, width int) string {
	if len(values) == 0 {
		return ""
	}
	width = min(width, len(values))
	var top int64
	for _, v := range values {
		top = max(top, v)
	}
	levels := []rune("▁▂▃▄▅▆▇█")
	var b strings.Builder
	for i := range width {
		var m int64
		for _, v := range values[i*len(values)/width : (i+1)*len(values)/width] {
			m = max(m, v)
		}
		b.WriteRune(levels[int(float64(m)/float64(max(top, 1))*float64(len(levels)-1)+0.5)])
	}
	return b.String()
}
