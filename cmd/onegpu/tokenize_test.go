package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

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
// are errors naming the flag, the file and the line.
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
		{[]string{"--tokenizer", fx, "--input", missing}, "", "--input: open " + missing},
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
