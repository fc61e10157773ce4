package main

import (
	"fmt"
	"io"
	"strings"
	"sync"
)

// The reference is another program: whatever it prints, compare holds and echoes a bounded
// amount of it, says how much it left out, and checks the result's shape before using it.
const (
	// compareStdoutLimit bounds what compare keeps of the reference's standard output, whose last
	// line is the result (a few kilobytes: losses, times and memory per step).
	compareStdoutLimit = 8 << 20
	// compareEchoHead and compareEchoTail bound the reference's standard error that compare echoes
	// to its progress: the first compareEchoHead bytes as they come, and the last compareEchoTail
	// bytes (where a traceback is) when the reference ends.
	compareEchoHead, compareEchoTail = 64 << 10, 64 << 10
	// compareQuoteLimit bounds the reference's output quoted in an error message.
	compareQuoteLimit = 2 << 10
)

// tailBuffer keeps the last limit bytes written to it and counts all of them.
type tailBuffer struct {
	limit   int
	buf     []byte // the kept bytes are its last limit; it is cut back when twice as long
	written int64
}

func (t *tailBuffer) Write(p []byte) (int, error) {
	t.written += int64(len(p))
	t.buf = append(t.buf, p...)
	if len(t.buf) > 2*t.limit {
		t.buf = append(t.buf[:0], t.buf[len(t.buf)-t.limit:]...)
	}
	return len(p), nil
}

// String returns the bytes kept.
func (t *tailBuffer) String() string { return string(t.buf[max(0, len(t.buf)-t.limit):]) }

// cut returns how many bytes were written and not kept.
func (t *tailBuffer) cut() int64 { return t.written - int64(min(len(t.buf), t.limit)) }

// quoteTail quotes the last compareQuoteLimit bytes of text for an error message, saying how
// many bytes came before them.
func quoteTail(text string, before int64) string {
	if len(text) > compareQuoteLimit {
		before += int64(len(text) - compareQuoteLimit)
		text = text[len(text)-compareQuoteLimit:]
	}
	if before > 0 {
		return fmt.Sprintf("(%d bytes left out) ...%q", before, text)
	}
	return fmt.Sprintf("%q", text)
}

// boundedEcho passes the first compareEchoHead bytes written to it on to w (indented), keeps the
// last compareEchoTail of the rest, and on finish writes those with a note of how much was left
// out in between. Safe for concurrent writes (exec copies standard error on its own goroutine).
type boundedEcho struct {
	mu     sync.Mutex
	w      io.Writer
	passed int
	tail   tailBuffer
}

func newBoundedEcho(w io.Writer, prefix string) *boundedEcho {
	return &boundedEcho{w: comparePrefixWriter{w: w, prefix: prefix}, tail: tailBuffer{limit: compareEchoTail}}
}

func (e *boundedEcho) Write(p []byte) (int, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	n := len(p)
	if e.passed < compareEchoHead {
		k := min(compareEchoHead-e.passed, len(p))
		e.w.Write(p[:k])
		e.passed += k
		p = p[k:]
	}
	if len(p) > 0 {
		e.tail.Write(p)
	}
	return n, nil
}

// finish writes the kept tail, after a note of the bytes left out before it.
func (e *boundedEcho) finish() {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.tail.written == 0 {
		return
	}
	text := e.tail.String()
	if cut := e.tail.cut(); cut > 0 {
		if i := strings.IndexByte(text, '\n'); i >= 0 && i < len(text)-1 { // start at a line
			cut += int64(i + 1)
			text = text[i+1:]
		}
		fmt.Fprintf(e.w, "[... %d bytes of the reference's output left out ...]\n", cut)
	}
	e.w.Write([]byte(text))
}

// checkSteps returns an error when the reference's per-step lists do not have one value per
// trained step (none when it only compiled), so that a short list is reported, not indexed.
func (s *compareSide) checkSteps(compileOnly bool) error {
	n := len(s.Loss)
	if compileOnly {
		n = 0
	}
	for _, list := range []struct {
		name   string
		values floats
	}{{"losses", s.Loss}, {"accuracies", s.Accuracy}, {"step times", s.StepSeconds}} {
		if len(list.values) != n {
			return fmt.Errorf("%d %s for %d steps: it must write one per step (loss, accuracy, step_seconds)", len(list.values), list.name, n)
		}
	}
	return nil
}
