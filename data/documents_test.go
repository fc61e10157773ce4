package data_test

import (
	"crypto/sha256"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/onegpu/onegpu/data"
)

// writeFile writes content to name in a temporary folder and returns its path.
func writeFile(t *testing.T, name, content string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

func trainedText(s string) data.Document {
	return data.Document{Pieces: []data.Piece{{Text: s, Trained: true}}, BOS: true, EOS: true}
}

// TestReadDocuments: each format gives the documents its records say, blank ones dropped, with
// the file's SHA-256 (what sha256sum prints).
func TestReadDocuments(t *testing.T) {
	chat := `{"messages": [{"role": "user", "content": " Hi? "}, {"role": "assistant", "content": "Hello.\n"}]}`
	for _, c := range []struct {
		name, file, content string
		format              data.TextFormat
		kind                string
		want                []data.Document
	}{
		{"text file", "a.txt", "one\ntwo\n", data.TextFormat{}, "text", []data.Document{trainedText("one\ntwo\n")}},
		{"separator", "a.txt", "one\n\n\n\ntwo\n\n \n\nthree", data.TextFormat{Separator: "\n\n"}, "text",
			[]data.Document{trainedText("one"), trainedText("two"), trainedText("three")}},
		{"text records", "a.jsonl", "{\"text\": \"a\\nb\", \"id\": 3}\n\n{\"text\": \"\"}\r\n{\"text\": \"c\"}", data.TextFormat{}, "text",
			[]data.Document{trainedText("a\nb"), trainedText("c")}},
		{"completions", "a.jsonl", `{"prompt": "2+2=", "completion": "4"}`, data.TextFormat{}, "prompt/completion",
			[]data.Document{{Pieces: []data.Piece{{Text: "2+2="}, {Text: "4", Trained: true}}, BOS: true, EOS: true}}},
		{"llama3 chat", "a.jsonl", chat, data.TextFormat{Template: "llama3"}, "messages (template llama3)",
			[]data.Document{{Pieces: []data.Piece{{Text: "<|start_header_id|>user<|end_header_id|>\n\n"}, {Text: "Hi?<|eot_id|>"},
				{Text: "<|start_header_id|>assistant<|end_header_id|>\n\n"}, {Text: "Hello.<|eot_id|>", Trained: true}}, BOS: true}}},
		{"plain chat", "a.jsonl", chat, data.TextFormat{Template: "plain"}, "messages (template plain)",
			[]data.Document{{Pieces: []data.Piece{{Text: "user:\n"}, {Text: "Hi?\n\n"},
				{Text: "assistant:\n"}, {Text: "Hello.\n\n", Trained: true}}, BOS: true, EOS: true}}},
	} {
		t.Run(c.name, func(t *testing.T) {
			path := writeFile(t, c.file, c.content)
			d, err := data.ReadDocuments(path, c.format)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(d.Docs, c.want) {
				t.Errorf("documents\n %+v\nwant\n %+v", d.Docs, c.want)
			}
			if d.Kind != c.kind || d.SHA256 != sha256.Sum256([]byte(c.content)) {
				t.Errorf("kind %q sha256 %x, want %q and the file's", d.Kind, d.SHA256, c.kind)
			}
		})
	}
}

// TestReadDocumentsFolder: a folder's .txt files are a document each, in name order; its hash
// changes with a file's name.
func TestReadDocumentsFolder(t *testing.T) {
	dir := t.TempDir()
	for name, content := range map[string]string{"b.txt": "second", "a.txt": "first", "c.md": "not text data", "d.txt": " \n"} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	d, err := data.ReadDocuments(dir, data.TextFormat{})
	if err != nil {
		t.Fatal(err)
	}
	if want := []data.Document{trainedText("first"), trainedText("second")}; !reflect.DeepEqual(d.Docs, want) {
		t.Fatalf("documents %+v, want %+v", d.Docs, want)
	}
	if err := os.Rename(filepath.Join(dir, "b.txt"), filepath.Join(dir, "e.txt")); err != nil {
		t.Fatal(err)
	}
	again, err := data.ReadDocuments(dir, data.TextFormat{})
	if err != nil {
		t.Fatal(err)
	}
	if again.SHA256 == d.SHA256 {
		t.Error("renaming a file left the folder's hash as it was")
	}
}

// TestReadDocumentsErrors: bad input is named, with its line, before anything is tokenized.
func TestReadDocumentsErrors(t *testing.T) {
	for _, c := range []struct {
		name, file, content string
		format              data.TextFormat
		want                []string
	}{
		{"not JSON", "a.jsonl", "{\"text\": \"a\"}\n{\"text\": \"b\"\n", data.TextFormat{}, []string{"line 2 is not a JSON object"}},
		{"not an object", "a.jsonl", "[1, 2]\n", data.TextFormat{}, []string{"line 1 is not a JSON object"}},
		{"missing field", "a.jsonl", "{\"prompt\": \"a\", \"completion\": \"b\"}\n\n{\"prompt\": \"c\"}\n", data.TextFormat{},
			[]string{"line 3", `no "completion" field`}},
		{"unknown fields", "a.jsonl", "{\"txt\": \"a\"}\n", data.TextFormat{}, []string{"line 1", `"txt"`, `"text"`, `"messages"`}},
		{"not a string", "a.jsonl", "{\"text\": 3}\n", data.TextFormat{}, []string{"line 1", `"text" is 3, not a string`}},
		{"bad message", "a.jsonl", `{"messages": [{"role": "user"}]}`, data.TextFormat{Template: "plain"}, []string{"line 1", "message 1", `no "content"`}},
		{"messages without template", "a.jsonl", "\n" + `{"messages": []}`, data.TextFormat{}, []string{"line 2", "chat template", "llama3, plain"}},
		{"unknown template", "a.jsonl", `{"messages": []}`, data.TextFormat{Template: "chatml"}, []string{`unknown chat template "chatml"`, "llama3, plain"}},
		{"template for text", "a.jsonl", `{"text": "a"}`, data.TextFormat{Template: "llama3"}, []string{"text records", "does not apply"}},
		{"template for a .txt", "a.txt", "a", data.TextFormat{Template: "llama3"}, []string{"not text"}},
		{"empty", "a.jsonl", "\n\n{\"text\": \" \"}\n", data.TextFormat{}, []string{"an empty data set"}},
		{"empty file", "a.txt", "", data.TextFormat{}, []string{"an empty data set"}},
		{"other suffix", "a.csv", "a,b", data.TextFormat{}, []string{".txt file", ".jsonl file"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			path := writeFile(t, c.file, c.content)
			_, err := data.ReadDocuments(path, c.format)
			if err == nil {
				t.Fatal("no error")
			}
			for _, w := range append(c.want, path) {
				if c.name == "unknown template" && w == path {
					continue // the name is wrong before any file is read
				}
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not say %q", err, w)
				}
			}
		})
	}
}
