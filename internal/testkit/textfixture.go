package testkit

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
)

// TextFixture is what reference/hf/text_fixture.py computed with the tokenizers library and
// transformers for a fixture whose folder holds a tokenizer (hf/testdata/NAME.text.json).
type TextFixture struct {
	// Dir is the fixture's folder (a model and its tokenizer); Notes and Chat the data files of
	// data/testdata the values are of.
	Dir, Notes, Chat string
	// NoteRecords are notes.jsonl's records: each one's ids (BOS, the text's, EOS), the targets
	// that carry the loss (1) and transformers' loss of the record alone (labels -100 elsewhere):
	// its mean, its sum and count.
	NoteRecords []TextRecord `json:"notes"`
	// Conversations are chat.jsonl's records rendered by each chat template (by name): the text
	// apply_chat_template writes, its ids and the assistant mask.
	Conversations map[string][]TextRecord `json:"chat"`
}

// TextRecord is one record of a TextFixture.
type TextRecord struct {
	Text    string  `json:"text"`
	IDs     []int   `json:"ids"`
	Trained []int   `json:"trained"`
	Loss    float64 `json:"loss"`
	LossSum float64 `json:"loss_sum"`
	Count   int     `json:"count"`
}

// ReadTextFixture reads hf/testdata/NAME.text.json.
func ReadTextFixture(t testing.TB, name string) TextFixture {
	t.Helper()
	dir := filepath.Join(hfTestdata(), name)
	raw, err := os.ReadFile(dir + ".text.json")
	if err != nil {
		t.Fatal(err)
	}
	f := TextFixture{Dir: dir}
	if err := json.Unmarshal(raw, &f); err != nil {
		t.Fatal(err)
	}
	data := filepath.Join(hfTestdata(), "..", "..", "data", "testdata")
	f.Notes, f.Chat = filepath.Join(data, "notes.jsonl"), filepath.Join(data, "chat.jsonl")
	return f
}
