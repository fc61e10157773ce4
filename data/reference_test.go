package data_test

import (
	"reflect"
	"testing"

	"github.com/onegpu/onegpu/data"
	"github.com/onegpu/onegpu/internal/testkit"
	"github.com/onegpu/onegpu/tokenizer"
)

// readReference tokenizes a data file of the text fixture with its tokenizer (onegpu's reader of
// the fixture's tokenizer.json).
func readReference(t *testing.T, fx testkit.TextFixture, path string, format data.TextFormat) *data.TokenizedText {
	t.Helper()
	tok, err := tokenizer.Load(fx.Dir)
	if err != nil {
		t.Fatal(err)
	}
	text, err := data.ReadTokenized(path, data.TokenizeOptions{Format: format, Tokenizer: tok, TokenizerSHA256: [32]byte{1}})
	if err != nil {
		t.Fatal(err)
	}
	return text
}

// checkRecords compares each document's ids and trained flags with the reference's records.
func checkRecords(t *testing.T, what string, text *data.TokenizedText, want []testkit.TextRecord) {
	t.Helper()
	if text.Documents() != len(want) {
		t.Fatalf("%s: %d documents, the reference has %d", what, text.Documents(), len(want))
	}
	for i, w := range want {
		ids, trained := text.Document(i)
		gotIDs, gotTrained := make([]int, len(ids)), make([]int, len(trained))
		for j := range ids {
			gotIDs[j], gotTrained[j] = int(ids[j]), int(trained[j])
		}
		if !reflect.DeepEqual(gotIDs, w.IDs) {
			t.Errorf("%s record %d: ids\n %v\nwant (tokenizers)\n %v", what, i+1, gotIDs, w.IDs)
		}
		if !reflect.DeepEqual(gotTrained, w.Trained) {
			t.Errorf("%s record %d: trained\n %v\nwant\n %v", what, i+1, gotTrained, w.Trained)
		}
	}
}

// TestNotesAsTransformers: the fixture's prompt/completion records (notes.jsonl) become the ids
// the tokenizers library gives BOS + prompt + completion + EOS, and the tokens that carry the loss
// are those holding completion text by its offsets (a third of the prompts end with a space that
// merges into the completion's first token), plus the EOS: every record.
func TestNotesAsTransformers(t *testing.T) {
	fx := testkit.ReadTextFixture(t, "llama3_untied")
	checkRecords(t, "notes", readReference(t, fx, fx.Notes, data.TextFormat{}), fx.NoteRecords)
}

// TestChatTemplatesAsTransformers: conversations rendered by the llama3 and plain templates have
// the ids of the text transformers' apply_chat_template writes (Llama 3's Jinja template; the
// plain template's in Jinja) and the assistant mask it returns (the {% generation %} spans).
func TestChatTemplatesAsTransformers(t *testing.T) {
	fx := testkit.ReadTextFixture(t, "llama3_untied")
	for _, name := range data.ChatTemplateNames() {
		want, ok := fx.Conversations[name]
		if !ok {
			t.Fatalf("the fixture has no conversations rendered by %q", name)
		}
		checkRecords(t, name, readReference(t, fx, fx.Chat, data.TextFormat{Template: name}), want)
	}
}
