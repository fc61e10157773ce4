package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/onegpu/onegpu/data"
	"github.com/onegpu/onegpu/platform"
	"github.com/onegpu/onegpu/train"
)

// notesFixture is the prompt/completion records made with the fixture's tokenizer
// (reference/hf/text_fixture.py).
var notesFixture = filepath.Join("..", "..", "data", "testdata", "notes.jsonl")

// TestTrainText: `train --init-hf FIXTURE --data notes.jsonl --eval-split 0.05 --eval-every 2
// --export-hf OUT` runs on the committed Llama and its tokenizer: 57 records train, 3 are held
// out and evaluated after steps 2 and 4 (JSON history and data summary), the export carries the
// tokenizer; the tokenized data is cached in the checkpoint folder, which records the data: a
// resumed run reads the cache, and one with another split is refused as other data.
func TestTrainText(t *testing.T) {
	t.Setenv(platform.EnvBackend, "")
	t.Setenv(platform.EnvPlugin, "")
	dir := t.TempDir()
	out, ck := filepath.Join(dir, "out"), filepath.Join(dir, "ck")
	args := []string{"--init-hf", hfFixture, "--data", notesFixture, "--eval-split", "0.05", "--eval-every", "2", "--batch", "4", "--microbatches", "2",
		"--checkpoint", ck}
	var buf bytes.Buffer
	if err := runTrain(append(args, "--steps", "4", "--export-hf", out, "--json"), &buf); err != nil {
		t.Fatalf("%v\n%s", err, buf.String())
	}
	var run struct {
		Data, EvalData *data.PackedStats
		Eval           []train.EvalPoint
		Steps          []train.StepMetrics
	}
	run.Data, run.EvalData = &data.PackedStats{}, &data.PackedStats{}
	if err := json.Unmarshal(buf.Bytes(), &struct {
		Data     *data.PackedStats    `json:"data"`
		EvalData *data.PackedStats    `json:"eval_data"`
		Eval     *[]train.EvalPoint   `json:"eval"`
		Steps    *[]train.StepMetrics `json:"steps"`
	}{run.Data, run.EvalData, &run.Eval, &run.Steps}); err != nil {
		t.Fatalf("%v\n%s", err, buf.String())
	}
	if run.Data.Documents != 57 || run.EvalData.Documents != 3 || run.Data.Packed != 57 || run.Data.Kind != "prompt/completion" || run.Data.SeqLen != 128 {
		t.Errorf("data %+v, evaluation data %+v: want 57 and 3 prompt/completion documents in sequences of 128", *run.Data, *run.EvalData)
	}
	if len(run.Eval) != 2 || run.Eval[0].Step != 2 || run.Eval[1].Step != 4 || run.Eval[0].Count != float64(run.EvalData.LossTokens) {
		t.Errorf("evaluations %+v: want steps 2 and 4 over the %d held-out targets", run.Eval, run.EvalData.LossTokens)
	}
	if len(run.Steps) != 4 {
		t.Errorf("%d steps, want 4", len(run.Steps))
	}
	if _, err := os.Stat(filepath.Join(out, "tokenizer.json")); err != nil {
		t.Errorf("the export has no tokenizer: %v", err)
	}
	buf.Reset()
	if err := runTrain(append(args, "--steps", "5"), &buf); err != nil || !strings.Contains(buf.String(), "resuming from step 4") ||
		!strings.Contains(buf.String(), "tokenized earlier: "+filepath.Join(ck, "tokenized")) || !strings.Contains(buf.String(), "eval loss") {
		t.Errorf("resuming: %v\n%s", err, buf.String())
	}
	buf.Reset()
	other := append(append([]string{}, args...), "--steps", "6")
	other[5] = "0.1"
	if err := runTrain(other, &buf); err == nil || !strings.Contains(err.Error(), "allow-other-data") {
		t.Errorf("resuming with another split: %v, want the data refused", err)
	}
}

// TestTrainTextChecksBeforeWork: text data's bad input is refused before anything is tokenized,
// built or trained (nothing printed), naming the flag, the file and the line.
func TestTrainTextChecksBeforeWork(t *testing.T) {
	t.Setenv(platform.EnvBackend, "")
	t.Setenv(platform.EnvPlugin, "")
	dir := t.TempDir()
	file := func(name, content string) string {
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
		return path
	}
	notJSON := file("bad.jsonl", "{\"text\": \"a\"}\n{\"text\": b}\n")
	missing := file("missing.jsonl", "{\"prompt\": \"a\", \"completion\": \"b\"}\n{\"prompt\": \"a\"}\n")
	chat := file("chat.jsonl", `{"messages": [{"role": "user", "content": "hi"}]}`)
	empty := file("empty.jsonl", "\n\n")
	hf := []string{"--init-hf", hfFixture, "--steps", "1"}
	for _, c := range []struct {
		args []string
		want string
	}{
		{append(hf, "--data", notJSON), notJSON + " line 2 is not a JSON object"},
		{append(hf, "--data", missing), missing + ` line 2: no "completion" field`},
		{append(hf, "--data", chat), "line 1 holds chat \"messages\": name a chat template"},
		{append(hf, "--data", chat, "--template", "chatml"), `--template: unknown chat template "chatml": the templates are llama3, plain`},
		{append(hf, "--data", empty), "an empty data set"},
		{append(hf, "--data", filepath.Join(dir, "none.jsonl")), "no such file"},
		{[]string{"--model", "llama", "--preset", "tiny", "--data", notesFixture}, "name its tokenizer with --tokenizer DIR"},
		{append(hf, "--data", notesFixture, "--tokenizer", filepath.Join("..", "..", "tokenizer", "testdata", "llama3")),
			"has 1024 tokens, more than the model's vocabulary of 256"},
		{append(hf, "--data", notesFixture, "--eval-every", "5"), "--eval-every 5 does not apply: nothing to evaluate"},
		{append(hf, "--data", notesFixture, "--eval-split", "1.5"), "--eval-split 1.5: hold out a share of the documents in (0, 1)"},
		{append(hf, "--data", notesFixture, "--eval-split", "0.1", "--eval-data", notesFixture), "use one"},
		{append(hf, "--data", notesFixture, "--eval-split", "0.1", "--offload", "params"), "--eval-data, --eval-split: evaluation runs the model whole on one device"},
		{[]string{"--data", "text", "--template", "llama3"}, "--template does not apply: --data text is not text data"},
		{[]string{"--model", "mlp", "--data", notesFixture}, "--data does not apply"},
	} {
		trainRefuses(t, c.args, c.want)
	}
}
