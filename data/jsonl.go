package data

import (
	"bytes"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	"github.com/onegpu/onegpu/internal/regularfile"
)

// NeedsTemplateError is returned for a .jsonl file of "messages" read without a chat template
// (TextFormat.Template).
type NeedsTemplateError struct {
	Path string
	Line int
}

func (e *NeedsTemplateError) Error() string {
	return fmt.Sprintf("%s line %d holds chat \"messages\": name a chat template to render them (TextFormat.Template): %s",
		e.Path, e.Line, strings.Join(ChatTemplateNames(), ", "))
}

// jsonlKind is what the records of a .jsonl file hold: the fields of its first record decide.
type jsonlKind struct {
	name   string   // Documents.Kind
	fields []string // the fields every record needs
}

var (
	textRecords       = jsonlKind{"text", []string{"text"}}
	completionRecords = jsonlKind{"prompt/completion", []string{"prompt", "completion"}}
	messageRecords    = jsonlKind{"messages", []string{"messages"}}
)

// readJSONL reads one JSON object a line (blank lines skipped): {"text": ...}, {"prompt": ...,
// "completion": ...} or {"messages": [{"role": ..., "content": ...}, ...]}, as the first record
// says; other fields are ignored.
func readJSONL(path string, format TextFormat) (*Documents, error) {
	raw, err := regularfile.ReadLinked(path, MaxTextBytes)
	if err != nil {
		return nil, err
	}
	d := &Documents{SHA256: sha256.Sum256(raw)}
	var kind *jsonlKind
	var template Template
	for i, line := range bytes.Split(raw, []byte("\n")) {
		number := i + 1
		line = bytes.TrimSpace(line)
		if len(line) == 0 {
			continue
		}
		var record map[string]json.RawMessage
		if err := json.Unmarshal(line, &record); err != nil {
			return nil, fmt.Errorf("%s line %d is not a JSON object (%v): a .jsonl file holds one JSON object a line", path, number, err)
		}
		if kind == nil {
			if kind = recordKind(record); kind == nil {
				return nil, fmt.Errorf("%s line %d has the fields %s: a record needs \"text\", \"prompt\" and \"completion\", or \"messages\"",
					path, number, fieldNames(record))
			}
			if kind == &messageRecords {
				if format.Template == "" {
					return nil, &NeedsTemplateError{Path: path, Line: number}
				}
				template, _ = ChatTemplate(format.Template) // ReadDocuments checked the name
				d.Kind = fmt.Sprintf("messages (template %s)", template.Name)
			} else if format.Template != "" {
				return nil, fmt.Errorf("%s holds %s records, not \"messages\": a chat template (TextFormat.Template %q) does not apply", path, kind.name, format.Template)
			} else {
				d.Kind = kind.name
			}
		}
		doc, err := recordDocument(record, kind, template)
		if err != nil {
			return nil, fmt.Errorf("%s line %d: %w", path, number, err)
		}
		if strings.TrimSpace(doc.Text()) != "" {
			d.Docs = append(d.Docs, doc)
		}
	}
	return d, nil
}

// recordKind is the kind of records whose fields record has, or nil.
func recordKind(record map[string]json.RawMessage) *jsonlKind {
	for _, k := range []*jsonlKind{&messageRecords, &completionRecords, &textRecords} {
		if hasFields(record, k.fields) {
			return k
		}
	}
	return nil
}

func hasFields(record map[string]json.RawMessage, fields []string) bool {
	for _, f := range fields {
		if _, ok := record[f]; !ok {
			return false
		}
	}
	return true
}

// fieldNames lists a record's fields, sorted and quoted.
func fieldNames(record map[string]json.RawMessage) string {
	if len(record) == 0 {
		return "{} (none)"
	}
	var names []string
	for name := range record {
		names = append(names, fmt.Sprintf("%q", name))
	}
	slices.Sort(names)
	return strings.Join(names, ", ")
}

// recordDocument reads one record of kind into a document.
func recordDocument(record map[string]json.RawMessage, kind *jsonlKind, template Template) (Document, error) {
	for _, f := range kind.fields {
		if _, ok := record[f]; !ok {
			return Document{}, fmt.Errorf("no %q field, which the file's first record has: every record of a file has the same fields (%s)",
				f, quoted(kind.fields))
		}
	}
	switch kind {
	case &textRecords:
		text, err := stringField(record, "text")
		return Document{Pieces: []Piece{{Text: text, Trained: true}}, BOS: true, EOS: true}, err
	case &completionRecords:
		prompt, err := stringField(record, "prompt")
		if err != nil {
			return Document{}, err
		}
		completion, err := stringField(record, "completion")
		return Document{Pieces: []Piece{{Text: prompt}, {Text: completion, Trained: true}}, BOS: true, EOS: true}, err
	}
	var messages []map[string]json.RawMessage
	if err := json.Unmarshal(record["messages"], &messages); err != nil {
		return Document{}, fmt.Errorf("\"messages\" is not a list of objects: want [{\"role\": ..., \"content\": ...}, ...]")
	}
	parsed := make([]Message, len(messages))
	for i, m := range messages {
		var err error
		if parsed[i].Role, err = stringField(m, "role"); err == nil {
			parsed[i].Content, err = stringField(m, "content")
		}
		if err != nil {
			return Document{}, fmt.Errorf("message %d: %w", i+1, err)
		}
	}
	return template.Render(parsed), nil
}

// stringField returns record[name] as a string, or an error saying what it is instead.
func stringField(record map[string]json.RawMessage, name string) (string, error) {
	raw, ok := record[name]
	if !ok {
		return "", fmt.Errorf("no %q field", name)
	}
	var s string
	if err := json.Unmarshal(raw, &s); err != nil {
		what := string(raw)
		if len(what) > 40 {
			what = what[:40] + "..."
		}
		return "", fmt.Errorf("%q is %s, not a string", name, what)
	}
	return s, nil
}

func quoted(names []string) string {
	q := make([]string, len(names))
	for i, n := range names {
		q[i] = fmt.Sprintf("%q", n)
	}
	return strings.Join(q, ", ")
}
