// Package progress draws the progress bars of long work: a training run's steps, a data set's
// tokenization.
package progress

import (
	"fmt"
	"io"
	"strings"
	"sync"
	"time"
	"unicode/utf8"
)

// Bar is a bar of width cells, done/total of them full: "[█████·····]".
func Bar(done, total, width int) string {
	full := 0
	if total > 0 {
		full = min(width, max(0, width*done/total))
	}
	return fmt.Sprintf("[%s%s]", strings.Repeat("█", full), strings.Repeat("·", width-full))
}

// Line rewrites one line of a terminal (a carriage return, no newline) with a bar and a note, at
// most every Interval: for work of many small parts. Done ends the line. A nil writer draws
// nothing. It is safe for concurrent use.
type Line struct {
	w        io.Writer
	what     string
	total    int
	interval time.Duration
	mu       sync.Mutex
	last     time.Time
	width    int // of the last line drawn, to blank what a shorter one leaves
}

// NewLine returns a line for total parts of work described by what ("tokenizing notes.jsonl").
func NewLine(w io.Writer, what string, total int) *Line {
	return &Line{w: w, what: what, total: total, interval: 200 * time.Millisecond}
}

// Show draws done/total parts and note, unless the last drawing is more recent than the
// interval.
func (l *Line) Show(done int, note string) {
	if l == nil || l.w == nil {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if now := time.Now(); now.Sub(l.last) >= l.interval {
		l.last = now
		l.draw(done, note, "")
	}
}

// Done draws the finished line and ends it.
func (l *Line) Done(note string) {
	if l == nil || l.w == nil {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.draw(l.total, note, "\n")
}

func (l *Line) draw(done int, note, end string) {
	s := fmt.Sprintf("%s %s %d/%d %s", l.what, Bar(done, l.total, 30), done, l.total, note)
	n := utf8.RuneCountInString(s)
	pad := max(0, l.width-n)
	l.width = n
	fmt.Fprintf(l.w, "\r%s%s%s", s, strings.Repeat(" ", pad), end)
}
