package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/onegpu/onegpu/internal/testkit"
	"github.com/onegpu/onegpu/tokenizer"
)

// tokenizerFixture is the Llama 3 style tokenizer the tokenizer package checks against the
// reference library.
var tokenizerFixture = filepath.Join("..", "..", "tokenizer", "testdata", "llama3")

// TestTokenizeEncodesLines: each line (an "\r\n" end dropped, as bufio.ScanLines does), or each
// --jsonl value, gives the library's ids, with the template's BOS unless --special=false; plain
// output is the ids separated by spaces, --json one array a line; --decode turns both back into
// the lines, and --skip-special drops the special tokens.
func TestTokenizeEncodesLines(t *testing.T) {
	tok, err := tokenizer.Load(tokenizerFixture)
	if err != nil {
		t.Fatal(err)
	}
	texts := []string{"Hello, world!", "", "  two  spaces<|eot_id|> and 123456 digits", "日本語 😀 naïve"}
	input := strings.Join(texts, "\n") + "\r\n" // a CRLF end on the last line
	run := func(stdin string, args ...string) string {
		t.Helper()
		var out, errOut bytes.Buffer
		if err := runTokenize(append([]string{"--tokenizer", tokenizerFixture}, args...), strings.NewReader(stdin), &out, &errOut); err != nil {
			t.Fatalf("%v: %v", args, err)
		}
		if !strings.Contains(errOut.String(), "onegpu tokenize: "+strconv.Itoa(strings.Count(stdin, "\n"))+" lines") {
			t.Errorf("%v: summary %q", args, errOut.String())
		}
		return out.String()
	}
	plain := strings.Split(strings.TrimSuffix(run(input), "\n"), "\n")
	arrays := strings.Split(strings.TrimSuffix(run(input, "--json"), "\n"), "\n")
	bare := strings.Split(strings.TrimSuffix(run(input, "--json", "--special=false"), "\n"), "\n")
	var jsonl strings.Builder
	for i, text := range texts {
		b, _ := json.Marshal(text)
		if i%2 == 1 {
			b, _ = json.Marshal(map[string]any{"text": text, "id": i})
		}
		jsonl.Write(append(b, '\n'))
	}
	fromJSONL := strings.Split(strings.TrimSuffix(run(jsonl.String(), "--jsonl", "--json"), "\n"), "\n")
	if len(plain) != len(texts) || len(arrays) != len(texts) || len(bare) != len(texts) || len(fromJSONL) != len(texts) {
		t.Fatalf("lines: %d %d %d %d, want %d", len(plain), len(arrays), len(bare), len(fromJSONL), len(texts))
	}
	for i, text := range texts {
		want := tok.Encode(text, true)
		var got, gotBare, gotJSONL []int
		for _, c := range []struct {
			line string
			into *[]int
		}{{arrays[i], &got}, {bare[i], &gotBare}, {fromJSONL[i], &gotJSONL}} {
			if err := json.Unmarshal([]byte(c.line), c.into); err != nil {
				t.Fatalf("%q: %v", c.line, err)
			}
		}
		if !slices.Equal(got, want) || !slices.Equal(gotBare, want[1:]) || !slices.Equal(gotJSONL, want) {
			t.Errorf("%q: --json %v, --special=false %v, --jsonl %v; want %v", text, got, gotBare, gotJSONL, want)
		}
		if fields := strings.Fields(plain[i]); len(fields) != len(want) || fields[0] != strconv.Itoa(want[0]) {
			t.Errorf("%q: plain output %q, want %v", text, plain[i], want)
		}
	}
	// Back: plain and JSON ids decode to the texts (with BOS, or without it given --skip-special).
	decoded := run(strings.Join(plain, "\n")+"\n", "--decode", "--skip-special")
	if want := strings.Join(texts, "\n") + "\n"; decoded != strings.ReplaceAll(want, "<|eot_id|>", "") {
		t.Errorf("--decode --skip-special: %q, want %q", decoded, want)
	}
	withSpecial := strings.Split(strings.TrimSuffix(run(strings.Join(arrays, "\n")+"\n", "--decode", "--json"), "\n"), "\n")
	for i, text := range texts {
		var got string
		if err := json.Unmarshal([]byte(withSpecial[i]), &got); err != nil || got != "<|begin_of_text|>"+text {
			t.Errorf("--decode --json line %d: %s (%v), want %q", i, withSpecial[i], err, "<|begin_of_text|>"+text)
		}
	}
}

// TestTokenizeRefuses: missing or contradictory flags, a tokenizer that cannot be read, a --jsonl
// line that is not JSON or has no text, and ids that are not numbers or outside the vocabulary
// are errors naming the flag, the file and the line. See TestTokenizeInputIsBounded for --input.
func TestTokenizeRefuses(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "none")
	input := filepath.Join(t.TempDir(), "ids.txt")
	if err := os.WriteFile(input, []byte("1 2 3\n4, 5x\n"), 0o666); err != nil {
		t.Fatal(err)
	}
	fx := tokenizerFixture
	for _, c := range []struct {
		args  []string
		stdin string
		want  string
	}{
		{nil, "", "tokenize needs --tokenizer DIR"},
		{[]string{"--tokenizer", fx, "--decode", "--jsonl"}, "", "--jsonl reads texts and --decode reads ids"},
		{[]string{"--tokenizer", fx, "--decode", "--special=false"}, "", "--special adds tokens when encoding"},
		{[]string{"--tokenizer", fx, "--skip-special"}, "", "--skip-special is for --decode"},
		{[]string{"--tokenizer", missing}, "", "--tokenizer: stat " + missing},
		{[]string{"--tokenizer", fx, "--input", missing}, "", "--input: stat " + missing},
		{[]string{"--tokenizer", fx, "--jsonl"}, "\"fine\"\n{\"text\": 1}\n", `stdin line 2: an object without a "text" string`},
		{[]string{"--tokenizer", fx, "--jsonl"}, "\"fine\"\nnot json\n", "stdin line 2: not JSON"},
		{[]string{"--tokenizer", fx, "--jsonl"}, "[1, 2]\n", "stdin line 1: an array, not a string"},
		{[]string{"--tokenizer", fx, "--decode", "--input", input}, "", input + ` line 2: "5x" is not a token id`},
		{[]string{"--tokenizer", fx, "--decode"}, "[1, 1024]\n", "stdin line 1: id 1024 is outside the tokenizer's vocabulary (0 to 1023)"},
		{[]string{"--tokenizer", fx, "--decode"}, "-1\n", "stdin line 1: id -1 is outside"},
	} {
		var out, errOut bytes.Buffer
		err := runTokenize(c.args, strings.NewReader(c.stdin), &out, &errOut)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v %q: got %v, want an error containing %q", c.args, c.stdin, err, c.want)
		}
	}
}

// zeros is an endless input without a line break, as stdin from /dev/zero.
type zeros struct{ read int }

func (z *zeros) Read(p []byte) (int, error) {
	clear(p)
	z.read += len(p)
	return len(p), nil
}

// TestTokenizeInputIsBounded: --input is a regular file or a link to one: a named pipe, a link to
// /dev/zero and a folder are refused at once, naming the file (before: a named pipe blocked
// forever and /dev/zero ended in Go's "out of memory"); a line is read whole up to a bound, and
// an endless input without a line break is refused once past it, naming the line, not read
// until memory runs out; lines up to the bound, with "\n" or "\r\n", read as before.
func TestTokenizeInputIsBounded(t *testing.T) {
	dir := t.TempDir()
	cases := map[string]string{filepath.Join(dir, "folder"): "folder is a folder, not a regular file"}
	if err := os.Mkdir(filepath.Join(dir, "folder"), 0o755); err != nil {
		t.Fatal(err)
	}
	if runtime.GOOS != "windows" {
		fifo := filepath.Join(dir, "fifo.txt")
		if err := testkit.MakeFIFO(fifo); err != nil {
			t.Fatal(err)
		}
		cases[fifo] = "fifo.txt is a named pipe, not a regular file"
		zero := filepath.Join(dir, "zero.txt")
		if err := os.Symlink("/dev/zero", zero); err != nil {
			t.Fatal(err)
		}
		cases[zero] = "zero.txt is a symbolic link to /dev/zero, which is a device, not a regular file"
	}
	for input, want := range cases {
		done := make(chan error, 1)
		go func() {
			done <- runTokenize([]string{"--tokenizer", tokenizerFixture, "--input", input}, strings.NewReader(""), io.Discard, io.Discard)
		}()
		select {
		case err := <-done:
			if err == nil || !strings.Contains(err.Error(), "--input: "+input) || !strings.Contains(err.Error(), want) {
				t.Errorf("--input %s: %v, want an error containing %q", input, err, want)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("tokenize --input %s has not ended in 10 s", input)
		}
	}

	const limit = 100
	endless := &zeros{}
	if line, err := readLine(bufio.NewReaderSize(endless, 16), limit); err == nil || !strings.Contains(err.Error(), "longer than 100 bytes") {
		t.Errorf("an endless line: %d bytes, %v", len(line), err)
	}
	if endless.read > limit+2+16 {
		t.Errorf("an endless line was read for %d bytes, past the bound of %d and one buffer", endless.read, limit)
	}
	exact := strings.Repeat("x", limit)
	r := bufio.NewReaderSize(strings.NewReader(exact+"\r\n"+exact+"\n"+exact+"y\nlast"), 16)
	var got []string
	for {
		line, err := readLine(r, limit)
		if err == io.EOF {
			break
		}
		if err != nil {
			got = append(got, "error: "+err.Error())
			break
		}
		got = append(got, line)
	}
	if want := []string{exact, exact, "error: longer than 100 bytes (100 B): tokenize reads a line at a time; split the text into lines"}; !slices.Equal(got, want) {
		t.Errorf("lines %q, want %q", got, want)
	}
}
