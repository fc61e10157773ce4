package checkpoint

import (
	"cmp"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"time"

	"github.com/onegpu/onegpu/internal/regularfile"
)

// manifest is the <name>.onegpu file of a checkpoint.
type manifest struct {
	Format    int       `json:"format"`
	Step      int       `json:"step"`
	Saved     time.Time `json:"saved"`
	WrittenBy WrittenBy `json:"written_by"`
	JSONSHA   string    `json:"json_sha256"`
	// JSONBytes is the .json's size (0 in the manifests of onegpu versions that did not record
	// it: the .json is then read up to maxMetadataBytes).
	JSONBytes int64  `json:"json_bytes,omitempty"`
	BinSHA    string `json:"bin_sha256"`
	BinBytes  int64  `json:"bin_bytes"`
}

// manifestKeys are the keys every manifest holds, with what each holds, for messages.
var manifestKeys = []struct{ key, want string }{
	{"format", "a number"}, {"step", "a number"}, {"written_by", "an object"},
	{"json_sha256", "a string"}, {"bin_sha256", "a string"}, {"bin_bytes", "a number"},
}

// maxManifestBytes bounds a manifest's size: onegpu's are under 2 KB, plus a model's config.
const maxManifestBytes = 1 << 20

// readManifest reads and checks the manifest at path. Its errors name the file and, for a
// damaged key, the key and what it should hold.
func readManifest(path string) (*manifest, error) {
	raw, err := regularfile.ReadAtMost(path, maxManifestBytes)
	if err != nil {
		return nil, fmt.Errorf("manifest %w", err)
	}
	return parseManifest(path, raw)
}

// parseManifest reads a manifest's bytes (from the file path, for messages).
func parseManifest(path string, raw []byte) (*manifest, error) {
	fail := func(format string, args ...any) error {
		return fmt.Errorf("manifest %s: %s", path, fmt.Sprintf(format, args...))
	}
	var keys map[string]json.RawMessage
	if err := json.Unmarshal(raw, &keys); err != nil {
		var syntax *json.SyntaxError
		if errors.As(err, &syntax) {
			return nil, fail("not JSON (%v at byte %d of %d)", syntax, syntax.Offset, len(raw))
		}
		return nil, fail("not a JSON object (%v)", err)
	}
	for _, k := range manifestKeys {
		if _, ok := keys[k.key]; !ok {
			return nil, fail("key %q is missing (it holds %s)", k.key, k.want)
		}
	}
	// Each key on its own, so that a message names the key that is damaged.
	var m manifest
	fields := []struct {
		key   string
		value any
	}{{"format", &m.Format}, {"step", &m.Step}, {"saved", &m.Saved}, {"written_by", &m.WrittenBy}, {"json_sha256", &m.JSONSHA},
		{"json_bytes", &m.JSONBytes}, {"bin_sha256", &m.BinSHA}, {"bin_bytes", &m.BinBytes}}
	for _, f := range fields {
		value, ok := keys[f.key]
		if !ok {
			continue
		}
		if err := json.Unmarshal(value, f.value); err != nil {
			var typeErr *json.UnmarshalTypeError
			if errors.As(err, &typeErr) {
				key := f.key
				if typeErr.Field != "" {
					key += "." + typeErr.Field
				}
				return nil, fail("key %q holds a JSON %s where %s belongs", key, typeErr.Value, jsonKind(typeErr.Type))
			}
			return nil, fail("key %q holds %s: %v", f.key, value, err)
		}
	}
	switch {
	case m.Format != manifestFormat:
		return nil, fail("key \"format\" is %d: this onegpu reads format %d (a checkpoint of another onegpu version?)", m.Format, manifestFormat)
	case m.Step < 0:
		return nil, fail("key \"step\" is %d: a step count is at least 0", m.Step)
	case m.BinBytes < 0:
		return nil, fail("key \"bin_bytes\" is %d: a size is at least 0", m.BinBytes)
	case m.JSONBytes < 0:
		return nil, fail("key \"json_bytes\" is %d: a size is at least 0", m.JSONBytes)
	}
	for _, k := range []struct{ key, value string }{{"json_sha256", m.JSONSHA}, {"bin_sha256", m.BinSHA}} {
		if b, err := hex.DecodeString(k.value); err != nil || len(b) != 32 {
			return nil, fail("key %q is %q: a SHA-256 is 64 hexadecimal digits", k.key, k.value)
		}
	}
	return &m, nil
}

// jsonKind says what JSON value decodes into a Go value of type t, for messages.
func jsonKind(t reflect.Type) string {
	switch t.Kind() {
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return "an integer"
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return "an integer of at least 0"
	case reflect.Float32, reflect.Float64:
		return "a number"
	case reflect.String:
		return "a string"
	case reflect.Bool:
		return "true or false"
	case reflect.Slice, reflect.Array:
		return "an array"
	}
	return "an object"
}

// WrittenBy is what a checkpoint records about the run that wrote it. Resuming compares it with
// the requested run before anything is built, so a checkpoint is never loaded into a model it
// does not fit, nor continued under settings that change what its numbers mean.
//
// Settings that must match on resume: the model and its sizes (its vocabulary and dropout among
// them), the precision policy, the optimizer with its hyperparameters, loss scale and clipping,
// the batch size, the seed (it chooses the data and the dropout masks), the schedule's kind and the
// adapters with their base's dtype and code. The data must match too unless the run allows other
// data (Folder.CheckData), and a run with adapters must train on the same base (Folder.CheckBase). Settings that may
// change on resume, because they change how a step is computed or how long the run is, not what
// the weights mean: the number of steps, the micro-batches, the schedule's rates and steps, remat
// and its policy, plain or chunked attention and cross-entropy, the offload, the devices and the
// backend. The sequence length is part of the model's description where the model has learned
// positions (the GPT: a resume at another length is refused); a model with rotary positions
// leaves it out of its description, and it may change. The onegpu version is recorded for the
// record only.
type WrittenBy struct {
	Onegpu string `json:"onegpu"`
	// Model describes the model and its sizes, e.g. "GPT small (4 layers × 256, 4 heads of 64,
	// sequence 128, MLP ×4, vocabulary 256, dropout 0.1)".
	Model string `json:"model"`
	// ModelType and ModelConfig are the model's Go type and its value as JSON, from which a
	// program that knows the type (train.Load) rebuilds the model with the checkpoint's path
	// alone; empty when the run did not record them.
	ModelType   string          `json:"model_type,omitempty"`
	ModelConfig json.RawMessage `json:"model_config,omitempty"`
	Policy      string          `json:"policy"`
	// Optimizer is the optimizer with its hyperparameters, then the loss scale and the clipping,
	// e.g. "adam(b1=0.9, b2=0.999, eps=1e-08), loss scale none".
	Optimizer string `json:"optimizer"`
	Batch     int    `json:"batch"`
	Seed      uint64 `json:"seed"`
	// Schedule is the schedule's kind, e.g. "warmup_exponential_decay": its rates may change.
	Schedule string `json:"schedule"`
	// Data is what the run trained on (see Folder.CheckData), e.g. "byte-level text of 366385
	// bytes, sha256 6f1e…"; "" when not recorded (checkpoints of earlier onegpu versions).
	Data string `json:"data,omitempty"`
	// May change on resume; recorded to say what the checkpoint was trained with.
	MicroBatches int    `json:"microbatches"`
	LearningRate string `json:"learning_rate"` // the schedule with its parameters
	Remat        string `json:"remat"`
	Offload      string `json:"offload,omitempty"`
	// Attention and CrossEntropy are layers.Attention's and layers.CrossEntropy's forms ("plain",
	// "chunked=1024"); empty in checkpoints written before they existed.
	Attention    string `json:"attention,omitempty"`
	CrossEntropy string `json:"cross_entropy,omitempty"`
	// Adapters describes the low-rank adapters a run trains on a frozen base, with the base's
	// dtype and code (e.g. "lora rank=16,alpha=32,targets=q_proj,v_proj; base bfloat16, nf4 ..."):
	// it must match on resume. Empty for a run that trains the whole model.
	Adapters string `json:"adapters,omitempty"`
	// BaseSHA256 and BaseFrom name the frozen base a run with adapters trains on (Folder.CheckBase):
	// the SHA-256 of its weights and where they came from ("Hugging Face folder ...", "the seed
	// 42"). Such a checkpoint holds the adapters, their optimizer state and the counters, never the
	// base: a resumed run makes the base again and must arrive at the same hash.
	BaseSHA256 string `json:"base_sha256,omitempty"`
	BaseFrom   string `json:"base_from,omitempty"`
}

// Differences lists each setting that must match on resume but does not, as "setting: this
// checkpoint was written by X; you asked for Y". Settings that may change are not listed, nor the
// data, which Folder.CheckData compares once the run knows it.
func (w WrittenBy) Differences(asked WrittenBy) []string {
	var diffs []string
	add := func(name string, written, wanted any) {
		if fmt.Sprint(written) != fmt.Sprint(wanted) {
			diffs = append(diffs, fmt.Sprintf("%s: this checkpoint was written by %v; you asked for %v", name, written, wanted))
		}
	}
	add("model", w.Model, asked.Model)
	add("policy", w.Policy, asked.Policy)
	add("optimizer", w.Optimizer, asked.Optimizer)
	add("batch", w.Batch, asked.Batch)
	add("seed", w.Seed, asked.Seed)
	add("schedule", w.Schedule, asked.Schedule)
	add("adapters", cmp.Or(w.Adapters, noAdapters), cmp.Or(asked.Adapters, noAdapters))
	return diffs
}

// noAdapters is how a difference names a run without adapters.
const noAdapters = "none (the whole model trains)"

// ConfigMismatchError is returned when a checkpoint folder holds a run of another config.
type ConfigMismatchError struct {
	Dir         string
	Differences []string
}

func (e *ConfigMismatchError) Error() string {
	return fmt.Sprintf("checkpoint folder %s holds another run; nothing was loaded or deleted:\n  %s\n"+
		"use another checkpoint folder (RunOptions.CheckpointDir), or the settings it was written with (steps, micro-batches, learning rate, remat, attention, cross-entropy, offload, devices and backend may change on resume)",
		e.Dir, strings.Join(e.Differences, "\n  "))
}

// BaseMismatchError is returned by Folder.CheckBase when a run's frozen base is not the one the
// adapters of the checkpoint it resumes were trained on.
type BaseMismatchError struct {
	Dir, Checkpoint string
	// Written and Asked are the checkpoint's base and the run's: a SHA-256 and where it came from.
	WrittenSHA256, WrittenFrom string
	AskedSHA256, AskedFrom     string
}

func (e *BaseMismatchError) Error() string {
	return fmt.Sprintf("checkpoint %s in %s holds adapters trained on another base; nothing was loaded or deleted:\n"+
		"  base: this checkpoint's is sha256 %s (%s);\n  this run's is sha256 %s (%s)\n"+
		"resume with the base it was trained on (the same weights given to Trainer.SetWeights in the same Config.BaseDType, or the same Config.Seed), or use another RunOptions.CheckpointDir",
		e.Checkpoint, e.Dir, e.WrittenSHA256, e.WrittenFrom, e.AskedSHA256, e.AskedFrom)
}

// DataMismatchError is returned by Folder.CheckData when the run's data is not the data the
// checkpoint it resumes was trained on.
type DataMismatchError struct {
	Dir, Checkpoint string
	Written, Asked  string // the checkpoint's data and the run's
}

func (e *DataMismatchError) Error() string {
	return fmt.Sprintf("checkpoint %s in %s was trained on other data; nothing was loaded or deleted:\n"+
		"  data: this checkpoint was trained on %s;\n  this run's data is %s\n"+
		"resume with the data it was trained on, or allow other data (RunOptions.AllowOtherData) to continue on this run's",
		e.Checkpoint, e.Dir, e.Written, e.Asked)
}
