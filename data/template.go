package data

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"unicode"
)

// Message is one turn of a conversation: who speaks ("system", "user", "assistant", ...) and what
// they say.
type Message struct {
	Role    string `json:"role"`
	Content string `json:"content"`
}

// Template renders a conversation as a document: the assistant's messages carry the loss (the
// model learns to reply), everything else is read only.
type Template struct {
	Name string
	// Description says what the template writes, for people.
	Description string
	render      func(messages []Message) Document
}

// Render renders messages as a document.
func (t Template) Render(messages []Message) Document { return t.render(messages) }

// chatTemplates are the templates onegpu writes itself.
var chatTemplates = map[string]Template{
	"llama3": {Name: "llama3", render: renderLlama3,
		Description: "Llama 3's chat template: <|begin_of_text|>, then per message <|start_header_id|>ROLE<|end_header_id|>, a blank line, " +
			"the content trimmed and <|eot_id|>; the assistant's content and its <|eot_id|> carry the loss"},
	"plain": {Name: "plain", render: renderPlain,
		Description: "ROLE: on a line, the content trimmed, a blank line, per message; the assistant's content and its blank line carry the loss; " +
			"the tokenizer's BOS and EOS around the conversation"},
}

// ChatTemplate returns the named template, or an error listing the templates.
func ChatTemplate(name string) (Template, error) {
	t, ok := chatTemplates[name]
	if !ok {
		return Template{}, fmt.Errorf("unknown chat template %q: the templates are %s", name, strings.Join(ChatTemplateNames(), ", "))
	}
	return t, nil
}

// ChatTemplateNames lists the templates, sorted.
func ChatTemplateNames() []string { return slices.Sorted(maps.Keys(chatTemplates)) }

// renderLlama3 writes Meta-Llama-3-Instruct's chat template (tokenizer_config.json's
// chat_template):
//
//	{{ bos_token }}{% for m in messages %}<|start_header_id|>{{ m.role }}<|end_header_id|>\n\n{{ m.content | trim }}<|eot_id|>{% endfor %}
//
// The BOS is the tokenizer's (Document.BOS), as transformers' apply_chat_template writes it.
func renderLlama3(messages []Message) Document {
	var pieces []Piece
	for _, m := range messages {
		pieces = append(pieces, Piece{Text: "<|start_header_id|>" + m.Role + "<|end_header_id|>\n\n"},
			Piece{Text: pythonTrim(m.Content) + "<|eot_id|>", Trained: m.Role == "assistant"})
	}
	return Document{Pieces: pieces, BOS: true}
}

// renderPlain writes "ROLE:\n" then the trimmed content and a blank line, per message, between the
// tokenizer's BOS and EOS.
func renderPlain(messages []Message) Document {
	var pieces []Piece
	for _, m := range messages {
		pieces = append(pieces, Piece{Text: m.Role + ":\n"}, Piece{Text: pythonTrim(m.Content) + "\n\n", Trained: m.Role == "assistant"})
	}
	return Document{Pieces: pieces, BOS: true, EOS: true}
}

// pythonTrim is Jinja's trim filter, Python's str.strip(): Go's unicode.IsSpace and the
// information separators U+001C to U+001F, which Python counts as whitespace.
func pythonTrim(s string) string {
	return strings.TrimFunc(s, func(r rune) bool { return unicode.IsSpace(r) || (r >= 0x1c && r <= 0x1f) })
}
