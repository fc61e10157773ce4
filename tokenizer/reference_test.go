package tokenizer

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// The fixtures reference/tokenizer/make_fixture.py makes with the Python tokenizers package (the
// Rust library): six tokenizer.json files in the exact settings of Llama 3, Qwen2, Llama 2
// (legacy and transformers 5's Metaspace), a splitting Metaspace and GPT-2's ByteLevel (with a
// prefix space), and the reference's ids and decodes of every case of the corpus.
var variants = []string{"llama3", "qwen2", "llama2", "llama2_metaspace", "metaspace_split", "gpt2"}

// referenceCases returns the cases the fixture script encodes: every line of corpus.txt and
// stress.txt, then every run of 8 of their lines joined by "\n". They are raw bytes: some are not
// valid UTF-8.
func referenceCases(t testing.TB) []string {
	t.Helper()
	var cases []string
	for _, name := range []string{"corpus.txt", "stress.txt"} {
		data, err := os.ReadFile(filepath.Join("testdata", name))
		if err != nil {
			t.Fatal(err)
		}
		lines := strings.Split(string(data), "\n")
		if lines[len(lines)-1] == "" {
			lines = lines[:len(lines)-1]
		}
		cases = append(cases, lines...)
		for i := 0; i < len(lines); i += 8 {
			cases = append(cases, strings.Join(lines[i:min(i+8, len(lines))], "\n"))
		}
	}
	return cases
}

// expectation is one line of expected.jsonl.gz: a case's ids and, where they differ from its
// text, its decodes; or a decode case, random ids and their decodes.
type expectation struct {
	IDs         []int   `json:"ids"`
	Decoded     *string `json:"decoded"`
	DecodedSkip *string `json:"decoded_skip"`
	Decode      []int   `json:"decode"`
	Text        string  `json:"text"`
	TextSkip    string  `json:"text_skip"`
}

type template_ struct {
	Prefix []int `json:"prefix"`
	Suffix []int `json:"suffix"`
}

func readExpected(t testing.TB, variant string) (template_, []expectation) {
	t.Helper()
	f, err := os.Open(filepath.Join("testdata", variant, "expected.jsonl.gz"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	z, err := gzip.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	sc := bufio.NewScanner(z)
	sc.Buffer(nil, 1<<24)
	var header template_
	var rows []expectation
	for sc.Scan() {
		if header.Prefix == nil && header.Suffix == nil && len(rows) == 0 {
			if err := json.Unmarshal(sc.Bytes(), &header); err != nil {
				t.Fatal(err)
			}
			if header.Prefix == nil {
				header.Prefix = []int{}
			}
			continue
		}
		var e expectation
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
			t.Fatal(err)
		}
		rows = append(rows, e)
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return header, rows
}

// TestMatchesReference: on every case of the corpus, for every variant, Encode gives the
// reference's ids (without and with the template's special tokens) and Decode its text (with and
// without skipSpecial), which is the case's text where the reference round-trips; Decode of
// random ids (some out of range) gives the reference's text.
func TestMatchesReference(t *testing.T) {
	cases := referenceCases(t)
	for _, variant := range variants {
		t.Run(variant, func(t *testing.T) {
			tok, err := Load(filepath.Join("testdata", variant))
			if err != nil {
				t.Fatal(err)
			}
			header, rows := readExpected(t, variant)
			if len(rows) < len(cases) {
				t.Fatalf("%d expectations for %d cases: regenerate the fixtures", len(rows), len(cases))
			}
			bad := 0
			report := func(format string, args ...any) {
				if bad++; bad <= 8 {
					t.Errorf(format, args...)
				}
			}
			roundTrips := 0
			for i, text := range cases {
				want := rows[i]
				if want.IDs == nil {
					t.Fatalf("expectation %d is not a case: regenerate the fixtures", i)
				}
				got := tok.Encode(text, false)
				if !slices.Equal(got, want.IDs) {
					report("case %d %q:\n got %v\nwant %v\n got %q\nwant %q", i, text, got, want.IDs,
						tokens(tok, got), tokens(tok, want.IDs))
					continue
				}
				full := slices.Concat(header.Prefix, want.IDs, header.Suffix)
				if got := tok.Encode(text, true); !slices.Equal(got, full) {
					report("case %d %q with special tokens: got %v, want %v", i, text, got, full)
				}
				valid := validUTF8(text)
				wantText, wantSkip := valid, valid
				if want.Decoded != nil {
					wantText = *want.Decoded
				} else {
					roundTrips++
				}
				if want.DecodedSkip != nil {
					wantSkip = *want.DecodedSkip
				}
				if got := tok.Decode(want.IDs, false); got != wantText {
					report("case %d: Decode = %q, want %q", i, got, wantText)
				}
				if got := tok.Decode(want.IDs, true); got != wantSkip {
					report("case %d: Decode skipping special tokens = %q, want %q", i, got, wantSkip)
				}
			}
			decodes := 0
			for _, want := range rows[len(cases):] {
				decodes++
				if got := tok.Decode(want.Decode, false); got != want.Text {
					report("Decode(%v) = %q, want %q", want.Decode, got, want.Text)
				}
				if got := tok.Decode(want.Decode, true); got != want.TextSkip {
					report("Decode(%v, skip) = %q, want %q", want.Decode, got, want.TextSkip)
				}
			}
			if bad > 0 {
				t.Fatalf("%d mismatches", bad)
			}
			t.Logf("%d cases equal to the reference (%d round-trip), %d random decodes", len(cases), roundTrips, decodes)
		})
	}
}

// tokens spells ids for a failure message.
func tokens(tok *Tokenizer, ids []int) []string {
	out := make([]string, len(ids))
	for i, id := range ids {
		s, ok := tok.Token(id)
		if !ok {
			s = "#" + strconv.Itoa(id)
		}
		out[i] = s
	}
	return out
}

// TestScannersMatchReference: the Llama 3, Qwen2 and GPT-2 scanners cut every case (as the
// reference receives it: valid UTF-8) where the reference's regex engine does.
func TestScannersMatchReference(t *testing.T) {
	cases := referenceCases(t)
	for name, pattern := range map[string]string{"llama3": patternLlama3, "qwen2": patternQwen2, "gpt2": patternGPT2} {
		t.Run(name, func(t *testing.T) {
			data, err := os.ReadFile(filepath.Join("testdata", "pretokenize", name+".txt"))
			if err != nil {
				t.Fatal(err)
			}
			lines := strings.Split(strings.TrimSuffix(string(data), "\n"), "\n")
			if len(lines) != len(cases) {
				t.Fatalf("%d lines for %d cases: regenerate the fixtures", len(lines), len(cases))
			}
			bad := 0
			for i, text := range cases {
				text = validUTF8(text)
				var got []string
				knownPatterns[pattern](text, func(a, b int) { got = append(got, strconv.Itoa(b-a)) })
				if g := strings.Join(got, " "); g != lines[i] {
					if bad++; bad <= 5 {
						t.Errorf("case %d %q:\n got %s\nwant %s\n pieces %q", i, text, g, lines[i], pieces(text, lines[i]))
					}
				}
			}
			if bad > 0 {
				t.Fatalf("%d of %d cases cut differently", bad, len(cases))
			}
		})
	}
}

// pieces cuts text at the byte lengths of a fixture line, for a failure message.
func pieces(text, lengths string) []string {
	var out []string
	for _, f := range strings.Fields(lengths) {
		n, _ := strconv.Atoi(f)
		n = min(n, len(text))
		out = append(out, text[:n])
		text = text[n:]
	}
	return out
}

// TestLegacyMergesFormat: merges written as "a b" strings (tokenizers before 0.20) load into the
// same tokenizer as pairs.
func TestLegacyMergesFormat(t *testing.T) {
	data, err := os.ReadFile(filepath.Join("testdata", "llama3", File))
	if err != nil {
		t.Fatal(err)
	}
	var doc map[string]any
	if err := json.Unmarshal(data, &doc); err != nil {
		t.Fatal(err)
	}
	model := doc["model"].(map[string]any)
	var legacy []string
	for _, p := range model["merges"].([]any) {
		pair := p.([]any)
		legacy = append(legacy, fmt.Sprintf("%s %s", pair[0], pair[1]))
	}
	model["merges"] = legacy
	rewritten, err := json.Marshal(doc)
	if err != nil {
		t.Fatal(err)
	}
	old, err := Parse(rewritten)
	if err != nil {
		t.Fatal(err)
	}
	tok, err := Parse(data)
	if err != nil {
		t.Fatal(err)
	}
	for _, text := range referenceCases(t)[:200] {
		if a, b := old.Encode(text, true), tok.Encode(text, true); !slices.Equal(a, b) {
			t.Fatalf("%q: legacy merges give %v, pairs %v", text, a, b)
		}
	}
	if !bytes.Contains(rewritten, []byte(`"Ġ t"`)) && !bytes.Contains(rewritten, []byte(`" `)) {
		t.Fatal("the rewrite did not write string merges")
	}
}

// readGzipLines returns the lines of a gzipped testdata file.
func readGzipLines(t testing.TB, name string) [][]byte {
	t.Helper()
	f, err := os.Open(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	z, err := gzip.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	var lines [][]byte
	sc := bufio.NewScanner(z)
	sc.Buffer(nil, 1<<26)
	for sc.Scan() {
		lines = append(lines, bytes.Clone(sc.Bytes()))
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return lines
}

// TestPreTokenizersMatchReference: Split with a String pattern in every behavior, with and
// without invert, known regexes through the generic path, Metaspace in every scheme with and
// without split, ByteLevel with a prefix space, and Sequences (Metaspace's "first" after a split)
// cut every seventh case as the reference does.
func TestPreTokenizersMatchReference(t *testing.T) {
	cases := referenceCases(t)
	for i, line := range readGzipLines(t, "pretokenize/configs.jsonl.gz") {
		var c struct {
			PreTokenizer json.RawMessage `json:"pre_tokenizer"`
			Pieces       [][]string      `json:"pieces"`
		}
		if err := json.Unmarshal(line, &c); err != nil {
			t.Fatal(err)
		}
		chain, byteLevel, err := parsePreTokenizer(c.PreTokenizer, "pre_tokenizer")
		if err != nil {
			t.Fatalf("config %d %s: %v", i, c.PreTokenizer, err)
		}
		bad := 0
		for k, want := range c.Pieces {
			text := validUTF8(cases[k*7])
			var got []string
			var run func(p piece, level int)
			run = func(p piece, level int) {
				if level == len(chain) {
					if byteLevel {
						p.text = byteLevelString(p.text)
					}
					got = append(got, p.text)
					return
				}
				chain[level].split(p, func(q piece) { run(q, level+1) })
			}
			run(piece{text, true}, 0)
			if !slices.Equal(got, want) && !(len(got) == 0 && len(want) == 0) {
				if bad++; bad <= 3 {
					t.Errorf("%s on case %d %q:\n got %q\nwant %q", c.PreTokenizer, k*7, text, got, want)
				}
			}
		}
		if bad > 0 {
			t.Errorf("%s: %d of %d cases differ", c.PreTokenizer, bad, len(c.Pieces))
		}
	}
}

// TestDecodersMatchReference: Strip, Metaspace (never, first), Replace, ByteFallback (also
// "<0x+F>", which Rust's number parser takes), Fuse, ByteLevel and a Sequence turn random token
// lists into the reference's text (lists on which the reference panics are left out).
func TestDecodersMatchReference(t *testing.T) {
	lines := readGzipLines(t, "decoders.jsonl.gz")
	var lists struct {
		Tokens [][]string `json:"tokens"`
	}
	if err := json.Unmarshal(lines[0], &lists); err != nil {
		t.Fatal(err)
	}
	for _, line := range lines[1:] {
		var c struct {
			Decoder json.RawMessage `json:"decoder"`
			Texts   []*string       `json:"texts"`
		}
		if err := json.Unmarshal(line, &c); err != nil {
			t.Fatal(err)
		}
		d, err := parseDecoder(c.Decoder, "decoder")
		if err != nil {
			t.Fatal(err)
		}
		checked := 0
		for k, want := range c.Texts {
			if want == nil {
				continue
			}
			checked++
			if got := strings.Join(d.decode(lists.Tokens[k]), ""); got != *want {
				t.Errorf("%s on %q: %q, want %q", c.Decoder, lists.Tokens[k], got, *want)
			}
		}
		t.Logf("%s: %d token lists", c.Decoder, checked)
	}
}
