package data

import (
	"bytes"
	"crypto/sha256"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/onegpu/onegpu/internal/regularfile"
)

// Piece is a span of a document's text and whether the model learns to predict its tokens: a
// completion, an assistant's reply and a plain text are trained; a prompt, another role's message
// and a template's headers are not (their tokens are read, not predicted).
type Piece struct {
	Text    string
	Trained bool
}

// Document is one training example as text: its pieces in order, and whether the tokenizer's
// beginning-of-sequence token starts it and its end-of-sequence token ends it (trained: the model
// learns where a document stops). A chat template that writes its own end-of-turn tokens sets no
// EOS.
type Document struct {
	Pieces   []Piece
	BOS, EOS bool
}

// Text is the document's text, its pieces joined.
func (d Document) Text() string {
	var b strings.Builder
	for _, p := range d.Pieces {
		b.WriteString(p.Text)
	}
	return b.String()
}

// TextFormat says how a data file's text becomes documents.
type TextFormat struct {
	// Separator, when set, splits a .txt file into documents at each occurrence (e.g. "\n\n" or
	// "<|endoftext|>"); unset, a .txt file is one document.
	Separator string
	// Template renders a .jsonl file's "messages" (ChatTemplate's names: "llama3", "plain"); a
	// messages file without one is an error.
	Template string
}

// MaxTextBytes bounds a data file (or a folder's files together): text is read into memory, and a
// larger file is more likely a mistaken path than a fine-tuning set.
const MaxTextBytes = 8 << 30

// Documents is a data set as text: its documents and what identifies it.
type Documents struct {
	Docs []Document
	// Kind says what the documents were read from: "text", "prompt/completion" or "messages
	// (template T)".
	Kind string
	// SHA256 is the hash of the bytes read: a file's SHA-256 (what sha256sum prints), a folder's
	// of each file's name and bytes, sorted by name, each prefixed by its length.
	SHA256 [32]byte
	// Format is the format that made documents of the bytes.
	Format TextFormat
	// Source names the file or folder.
	Source string
}

// ReadDocuments reads a data set of text: a .txt file (one document, or documents split on
// format.Separator), a folder of .txt files (one document a file, sorted by name) or a .jsonl
// file (one JSON object a line: a "text" field, "prompt" and "completion", or "messages" rendered
// by format.Template). Blank documents are dropped. It returns an error naming the file, and the
// line for a .jsonl, for anything that cannot be read: a line that is not JSON, a record without
// the fields, an unknown template, no document at all.
func ReadDocuments(path string, format TextFormat) (*Documents, error) {
	if format.Template != "" {
		if _, err := ChatTemplate(format.Template); err != nil {
			return nil, err
		}
	}
	info, err := os.Stat(path)
	if err != nil {
		return nil, err
	}
	if format.Template != "" && !strings.HasSuffix(path, ".jsonl") {
		return nil, fmt.Errorf("%s: a chat template (TextFormat.Template %q) renders the \"messages\" of a .jsonl file, not text", path, format.Template)
	}
	var d *Documents
	switch {
	case info.IsDir():
		d, err = readTextFolder(path, format)
	case strings.HasSuffix(path, ".txt"):
		d, err = readTextFile(path, format)
	case strings.HasSuffix(path, ".jsonl"):
		if format.Separator != "" {
			return nil, fmt.Errorf("%s: a separator splits .txt files; a .jsonl file has one document a line", path)
		}
		d, err = readJSONL(path, format)
	default:
		return nil, fmt.Errorf("%s: text data is a .txt file, a folder of .txt files or a .jsonl file", path)
	}
	if err != nil {
		return nil, err
	}
	if len(d.Docs) == 0 {
		return nil, fmt.Errorf("%s: no documents (an empty data set): every document is blank", path)
	}
	d.Source, d.Format = path, format
	return d, nil
}

// readTextFile reads one .txt file as one document or, with a separator, as several.
func readTextFile(path string, format TextFormat) (*Documents, error) {
	raw, err := regularfile.ReadLinked(path, MaxTextBytes)
	if err != nil {
		return nil, err
	}
	d := &Documents{Kind: "text"}
	d.Docs = appendTexts(d.Docs, splitText(raw, format.Separator))
	d.SHA256 = sha256.Sum256(raw)
	return d, nil
}

// readTextFolder reads the .txt files of a folder, one document each.
func readTextFolder(dir string, format TextFormat) (*Documents, error) {
	names, err := filepath.Glob(filepath.Join(dir, "*.txt"))
	if err != nil {
		return nil, err
	}
	if len(names) == 0 {
		return nil, fmt.Errorf("%s: a folder of text data holds .txt files, one document each; it has none", dir)
	}
	slices.Sort(names)
	d := &Documents{Kind: "text"}
	parts := [][]byte{}
	var total int64
	for _, name := range names {
		raw, err := regularfile.ReadLinked(name, MaxTextBytes-total)
		if err != nil {
			return nil, err
		}
		total += int64(len(raw))
		parts = append(parts, []byte(filepath.Base(name)), raw)
		d.Docs = appendTexts(d.Docs, splitText(raw, format.Separator))
	}
	d.SHA256 = partsHash(parts)
	return d, nil
}

// splitText cuts raw at each separator ("" keeps it whole).
func splitText(raw []byte, separator string) [][]byte {
	if separator == "" {
		return [][]byte{raw}
	}
	return bytes.Split(raw, []byte(separator))
}

// appendTexts appends a trained document of each text that is not blank.
func appendTexts(docs []Document, texts [][]byte) []Document {
	for _, t := range texts {
		if len(bytes.TrimSpace(t)) == 0 {
			continue
		}
		docs = append(docs, Document{Pieces: []Piece{{Text: string(t), Trained: true}}, BOS: true, EOS: true})
	}
	return docs
}

// HashFiles returns the SHA-256 of the named files' names (without their folder) and bytes, each
// prefixed by its length; a file that does not exist counts as absent. It is what the cache and a
// checkpoint know a tokenizer by (its tokenizer.json and the configs that name BOS and EOS).
func HashFiles(paths ...string) ([32]byte, error) {
	var parts [][]byte
	for _, path := range paths {
		raw, err := regularfile.ReadLinked(path, MaxTextBytes)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return [32]byte{}, err
		}
		parts = append(parts, []byte(filepath.Base(path)), raw)
	}
	return partsHash(parts), nil
}

// partsHash is the SHA-256 of the parts read, each prefixed by its length so that no two
// sequences of parts collide.
func partsHash(parts [][]byte) [32]byte {
	h := sha256.New()
	for _, p := range parts {
		fmt.Fprintf(h, "%d\n", len(p))
		h.Write(p)
	}
	var sum [32]byte
	copy(sum[:], h.Sum(nil))
	return sum
}
