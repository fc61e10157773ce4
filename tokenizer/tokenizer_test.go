package tokenizer

import (
	"encoding/json"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
)

// TestValidUTF8: invalid sequences become one U+FFFD per maximal subpart, as Python's
// errors="replace" gives for each input (the expectations are its output).
func TestValidUTF8(t *testing.T) {
	for in, want := range map[string]string{
		"plain é 😀":            "plain é 😀",
		"\xf0\x9f\x98a":        "\ufffda",
		"\xff\xfe":             "\ufffd\ufffd",
		"\xed\xa0\x80":         "\ufffd\ufffd\ufffd",
		"\xe2\x82":             "\ufffd",
		"\xc0\xaf":             "\ufffd\ufffd",
		"\xf4\x90\x80\x80":     "\ufffd\ufffd\ufffd\ufffd",
		"\xe0\x80\x80":         "\ufffd\ufffd\ufffd",
		"\xf0(\x8c\xbc":        "\ufffd(\ufffd\ufffd",
		"a\xc3":                "a\ufffd",
		"\xe2(\xa1":            "\ufffd(\ufffd",
		"\xf8\x88\x80\x80\x80": "\ufffd\ufffd\ufffd\ufffd\ufffd",
	} {
		if got := validUTF8(in); got != want {
			t.Errorf("validUTF8(%q) = %q, want %q", in, got, want)
		}
	}
}

// TestUnsupportedComponentsAreErrors: a component onegpu does not read is an error naming its
// JSON path and type, and so are files the reference would encode differently from what they say.
func TestUnsupportedComponentsAreErrors(t *testing.T) {
	data, err := os.ReadFile(filepath.Join("testdata", "llama3", File))
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name   string
		change func(doc map[string]any)
		want   string
	}{
		{"WordPiece model", func(d map[string]any) { d["model"].(map[string]any)["type"] = "WordPiece" },
			`model: model type "WordPiece" is not supported`},
		{"Unigram model", func(d map[string]any) { d["model"] = map[string]any{"type": "Unigram", "vocab": []any{}} },
			`model: model type "Unigram" is not supported`},
		{"Lowercase normalizer", func(d map[string]any) {
			d["normalizer"] = map[string]any{"type": "Sequence", "normalizers": []any{
				map[string]any{"type": "NFC"}, map[string]any{"type": "Lowercase"}}}
		}, `normalizer.normalizers[1]: normalizer type "Lowercase" is not supported`},
		{"unknown regex", func(d map[string]any) {
			pre := d["pre_tokenizer"].(map[string]any)["pretokenizers"].([]any)[0].(map[string]any)
			pre["pattern"] = map[string]any{"Regex": `\w+`}
		}, `pre_tokenizer.pretokenizers[0].pattern: the regex "\\w+" is not supported`},
		{"Whitespace pre-tokenizer", func(d map[string]any) { d["pre_tokenizer"] = map[string]any{"type": "Whitespace"} },
			`pre_tokenizer: pre-tokenizer type "Whitespace" is not supported`},
		{"WordPiece decoder", func(d map[string]any) {
			d["decoder"] = map[string]any{"type": "Sequence", "decoders": []any{map[string]any{"type": "WordPiece"}}}
		}, `decoder.decoders[0]: decoder type "WordPiece" is not supported`},
		{"Bert post-processor", func(d map[string]any) { d["post_processor"] = map[string]any{"type": "BertProcessing"} },
			`post_processor: post-processor type "BertProcessing" is not supported`},
		{"truncation", func(d map[string]any) { d["truncation"] = map[string]any{"max_length": 512} }, "truncation: set"},
		{"dropout", func(d map[string]any) { d["model"].(map[string]any)["dropout"] = 0.1 }, "model.dropout: 0.1"},
		{"added token id", func(d map[string]any) {
			d["added_tokens"].([]any)[1].(map[string]any)["id"] = 5000
		}, `added_tokens[1]: "<|end_of_text|>" has id 5000 in the file, but the tokenizers library gives it 1001`},
		{"merge outside the vocabulary", func(d map[string]any) {
			m := d["model"].(map[string]any)
			m["merges"] = append(m["merges"].([]any), []any{"Ġ", "nonexistent"})
		}, `"nonexistent" is not in the vocabulary`},
	} {
		t.Run(c.name, func(t *testing.T) {
			var doc map[string]any
			if err := json.Unmarshal(data, &doc); err != nil {
				t.Fatal(err)
			}
			c.change(doc)
			changed, err := json.Marshal(doc)
			if err != nil {
				t.Fatal(err)
			}
			_, err = Parse(changed)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("got %v, want an error containing %q", err, c.want)
			}
		})
	}
}

// TestSpecialTokens: BOS and EOS come from the folder's tokenizer_config.json and
// generation_config.json (also when Load is given the file); without them from the template, or
// from the known end-of-text tokens.
func TestSpecialTokens(t *testing.T) {
	for _, c := range []struct {
		path    string
		bos     int
		eos     []int
		special map[string]bool
	}{
		// generation_config.json's three ids, then tokenizer_config.json's <|eot_id|> (already there).
		{"llama3", 1000, []int{1001, 1008, 1009}, map[string]bool{"<|eot_id|>": true, "onegpu": false}},
		{filepath.Join("llama3", File), 1000, []int{1001, 1008, 1009}, nil},
		{"llama2", 1, []int{2}, map[string]bool{"<s>": true, "New York": false}}, // </s>, a known end token
		{"metaspace_split", 1, []int{2}, nil},                                    // the template's </s>
		{"qwen2", -1, []int{1001, 1009, 1008, 1014, 1016}, map[string]bool{"<|im_end|>": true, "café": false}},
	} {
		tok, err := Load(filepath.Join("testdata", c.path))
		if err != nil {
			t.Fatal(err)
		}
		if bos, ok := tok.BOS(); bos != c.bos || ok != (c.bos >= 0) {
			t.Errorf("%s: BOS() = %d, %v, want %d", c.path, bos, ok, c.bos)
		}
		if eos := tok.EOSTokens(); !slices.Equal(eos, c.eos) {
			t.Errorf("%s: EOSTokens() = %v, want %v", c.path, eos, c.eos)
		}
		for name, special := range c.special {
			id, ok := tok.ID(name)
			if back, _ := tok.Token(id); !ok || back != name || tok.IsSpecial(id) != special {
				t.Errorf("%s: %q: id %d %v, back %q, special %v, want %v", c.path, name, id, ok, back, tok.IsSpecial(id), special)
			}
		}
		if tok.VocabSize() != 1024 {
			t.Errorf("%s: VocabSize() = %d, want 1024", c.path, tok.VocabSize())
		}
	}
	if _, err := Load(t.TempDir()); err == nil || !strings.Contains(err.Error(), "has no "+File) {
		t.Errorf("a folder without %s: got %v", File, err)
	}
}

// TestConcurrentEncode: Encode from several goroutines at once (sharing the word cache) gives
// what it gives alone.
func TestConcurrentEncode(t *testing.T) {
	tok, err := Load(filepath.Join("testdata", "llama3"))
	if err != nil {
		t.Fatal(err)
	}
	cases := referenceCases(t)
	want := make([][]int, len(cases))
	for i, c := range cases {
		want[i] = tok.Encode(c, true)
	}
	fresh, err := Load(filepath.Join("testdata", "llama3"))
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for g := 0; g < 4; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range cases {
				k := (i*7 + g*131) % len(cases)
				if got := fresh.Encode(cases[k], true); !slices.Equal(got, want[k]) {
					t.Errorf("case %d: %v, alone %v", k, got, want[k])
					return
				}
			}
		}()
	}
	wg.Wait()
}

// TestLoadFollowsLinksToFiles: a folder whose files are links to regular files (the Hugging Face
// cache's snapshots) loads; a link to a device is refused without being read.
func TestLoadFollowsLinksToFiles(t *testing.T) {
	if runtime.GOOS == "windows" {
		t.Skip("symbolic links need privileges on windows")
	}
	fixture, err := filepath.Abs(filepath.Join("testdata", "llama3"))
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	for _, name := range []string{File, configFile, generationConfigFile} {
		if err := os.Symlink(filepath.Join(fixture, name), filepath.Join(dir, name)); err != nil {
			t.Fatal(err)
		}
	}
	tok, err := Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	if eos := tok.EOSTokens(); !slices.Equal(eos, []int{1001, 1008, 1009}) {
		t.Errorf("through links: EOSTokens() = %v", eos)
	}
	bad := t.TempDir()
	if err := os.Symlink("/dev/zero", filepath.Join(bad, File)); err != nil {
		t.Fatal(err)
	}
	if _, err := Load(bad); err == nil || !strings.Contains(err.Error(), "a symbolic link to /dev/zero, which is a device") {
		t.Errorf("a link to /dev/zero: got %v", err)
	}
}
