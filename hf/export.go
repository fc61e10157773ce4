package hf

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/gomlx/gomlx/pkg/ml/context"

	"github.com/onegpu/onegpu/hf/safetensors"
	"github.com/onegpu/onegpu/internal/atomicfile"
	"github.com/onegpu/onegpu/internal/regularfile"
)

// DefaultMaxShardBytes is the largest weights file Export writes before it shards: 5 GB, the
// default of transformers 4's save_pretrained (transformers 5 raised its own to 50 GB; 5 GB files
// are easier to move and to load shard by shard).
const DefaultMaxShardBytes = 5_000_000_000

// ExportOptions are Export's choices; the zero value writes float32 in 5 GB shards.
type ExportOptions struct {
	// DType of the tensors in the files: dtypes.Float32 (the default, for InvalidDType) or
	// dtypes.BFloat16 (rounded to nearest, ties to even).
	DType dtypes.DType
	// MaxShardBytes: above it the weights are split into model-0000i-of-0000n.safetensors files
	// with an index, in the order of the model's tensors (Layout.Tensors), as save_pretrained
	// splits them (a tensor larger than the limit gets a file of its own). DefaultMaxShardBytes
	// when 0.
	MaxShardBytes int64
	// From is the checkpoint folder the model was loaded from, or "": the fields of its
	// config.json that do not describe the model's math (token ids, generation settings, ...) are
	// kept in the exported config.json, and its tokenizer and generation files are copied. Export
	// refuses to write into it (*SourceFolderError).
	From string
	// Overwrite lets Export write into a folder that holds files it did not export (see
	// CheckExportFolder): its config.json and weights are replaced and its other weights files
	// removed; other files are left as they are. False (the default) refuses such a folder with a
	// *ForeignFolderError.
	Overwrite bool
}

// carried are the files of a source checkpoint that Export copies: the tokenizer's and the
// generation settings, small files transformers reads beside the weights.
var carried = []string{"tokenizer.json", "tokenizer_config.json", "tokenizer.model", "special_tokens_map.json",
	"added_tokens.json", "vocab.json", "merges.txt", "generation_config.json", "chat_template.jinja"}

// torchDType names the export dtypes as config.json does.
var torchDType = map[dtypes.DType]string{dtypes.Float32: "float32", dtypes.BFloat16: "bfloat16"}

// weightFile matches the weights files of a Hugging Face folder, which Export replaces.
var weightFile = regexp.MustCompile(`^model(-\d{5}-of-\d{5})?\.safetensors(\.index\.json)?$`)

// Export writes model (an onegpu model a registered family writes: Describe), whose variables are
// under ctx's scope (as Open or the model create them), as a Hugging Face checkpoint in dir, which
// transformers loads as the family's class unchanged (a models.Llama as LlamaForCausalLM, one with
// q/k/v biases as Qwen2ForCausalLM): config.json (the family's fields; transformers 4's, which
// transformers 5 reads too) and the weights, model.safetensors or shards and an index above
// opts.MaxShardBytes. Each file is
// written whole or not at all (a temporary file, synced, renamed); weights files of an earlier
// export in dir that this one did not write are removed last, so that transformers cannot pick up
// a stale model.safetensors. Tensors are converted and written one at a time: beyond the
// variables, Go holds one tensor (its host copy, when it lives on a device) and a 1 MiB buffer.
//
// dir is a new or empty folder, or one Export wrote before, which it recognizes by MarkerFile
// (written first, so that a folder an export left half-written is recognized too, and locked
// while Export writes); any other folder is refused unless opts.Overwrite (see
// CheckExportFolder, which a run calls before it trains). Temporary files a killed export left
// are removed. A variable missing from ctx or shaped unlike the model, or a folder Export may
// not write, is an error before anything is written.
func Export(ctx *context.Context, dir string, model any, opts ExportOptions) error {
	if v, ok := model.(interface{ Validate() error }); ok {
		if err := v.Validate(); err != nil {
			return fmt.Errorf("exporting to %s: %w", dir, err)
		}
	}
	layout, err := Describe(model)
	if err != nil {
		return fmt.Errorf("exporting to %s: %w", dir, err)
	}
	if opts.DType == dtypes.InvalidDType {
		opts.DType = dtypes.Float32
	}
	if opts.DType != dtypes.Float32 && opts.DType != dtypes.BFloat16 {
		return fmt.Errorf("exporting to %s: dtype %s: Hugging Face checkpoints are written in float32 or bfloat16", dir, opts.DType)
	}
	if opts.MaxShardBytes == 0 {
		opts.MaxShardBytes = DefaultMaxShardBytes
	}
	if opts.MaxShardBytes < 0 {
		return fmt.Errorf("exporting to %s: MaxShardBytes %d must be positive", dir, opts.MaxShardBytes)
	}
	to := fileTypes[opts.DType]
	buf := make([]byte, 2*chunkBytes) // one conversion buffer for every tensor: 1 MiB of source values, as float32 at most twice that
	var shards [][]safetensors.Tensor
	var shardBytes, total int64
	var problems []string
	for _, spec := range layout.Tensors() {
		v := lookupVariable(ctx, spec.Name)
		switch {
		case v == nil:
			problems = append(problems, fmt.Sprintf("no variable for %s (%s)", spec.Name, scopeName(ctx, spec.Name)))
			continue
		case !slices.Equal(v.Shape().Dimensions, spec.Shape):
			problems = append(problems, fmt.Sprintf("variable %s has shape %v, the config gives %s %v", v.ScopeAndName(), v.Shape().Dimensions, spec.Name, spec.Shape))
			continue
		}
		from, ok := fileTypes[v.DType()]
		if !ok {
			problems = append(problems, fmt.Sprintf("variable %s is %s, not a floating-point dtype", v.ScopeAndName(), v.DType()))
			continue
		}
		size := int64(v.Shape().Size()) * int64(valueBytes(to))
		if len(shards) == 0 || (shardBytes > 0 && shardBytes+size > opts.MaxShardBytes) {
			shards, shardBytes = append(shards, nil), 0
		}
		shardBytes += size
		total += size
		shards[len(shards)-1] = append(shards[len(shards)-1], safetensors.Tensor{Name: spec.Name, DType: to, Shape: spec.Shape,
			Data: func(w io.Writer) error { return writeVariable(w, v, from, to, buf) }})
	}
	if len(problems) > 0 {
		return fmt.Errorf("exporting to %s (nothing was written):\n  %s", dir, strings.Join(problems, "\n  "))
	}
	folder, err := claimFolder(dir, exported, func() error { return CheckExportFolder(dir, opts) })
	if err != nil {
		return fmt.Errorf("exporting to %s (nothing was written): %w", dir, err)
	}
	written, err := writeExport(dir, layout, opts, shards, total)
	if err != nil {
		return errors.Join(err, folder.close())
	}
	return folder.finish(written)
}

// writeExport writes the weights in shards, the config and the carried files into dir, removes
// stale weights files, and returns the names written.
func writeExport(dir string, layout Layout, opts ExportOptions, shards [][]safetensors.Tensor, total int64) (map[string]bool, error) {
	written := map[string]bool{}
	metadata := map[string]string{"format": "pt"} // transformers refuses safetensors files without it
	if len(shards) == 1 {
		if err := safetensors.WriteFile(filepath.Join(dir, SingleFile), shards[0], metadata); err != nil {
			return nil, err
		}
		written[SingleFile] = true
	} else {
		idx := index{Metadata: map[string]any{"total_size": total, "total_parameters": layout.Params()}, WeightMap: map[string]string{}}
		for i, shard := range shards {
			name := fmt.Sprintf("model-%05d-of-%05d.safetensors", i+1, len(shards))
			if err := safetensors.WriteFile(filepath.Join(dir, name), shard, metadata); err != nil {
				return nil, err
			}
			written[name] = true
			for _, t := range shard {
				idx.WeightMap[t.Name] = name
			}
		}
		raw, _ := json.MarshalIndent(idx, "", "  ")
		if err := writeFileAtomic(filepath.Join(dir, IndexFile), append(raw, '\n')); err != nil {
			return nil, err
		}
		written[IndexFile] = true
	}
	if err := writeConfig(dir, layout, opts); err != nil {
		return nil, err
	}
	written[ConfigFile] = true
	if err := copyCarried(dir, opts.From, written); err != nil {
		return nil, err
	}
	return written, removeStale(dir, written)
}

// scopeName is the scope and variable name a tensor maps to, for messages.
func scopeName(ctx *context.Context, tensorName string) string {
	scope, name := VariableOf(ctx, tensorName)
	return context.JoinScope(scope.Scope(), name)
}

// writeVariable writes a variable's value converted to the file's dtype, 1 MiB of it at a time
// through buf (at least 2 MiB).
func writeVariable(w io.Writer, v *context.Variable, from, to safetensors.DType, buf []byte) error {
	value, err := v.Value()
	if err != nil {
		return err
	}
	var writeErr error
	err = value.ConstBytes(func(src []byte) {
		step := chunkBytes / valueBytes(from) * valueBytes(from)
		for pos := 0; pos < len(src) && writeErr == nil; pos += step {
			chunk := src[pos:min(pos+step, len(src))]
			out := buf[:len(chunk)/valueBytes(from)*valueBytes(to)]
			if writeErr = convert(out, to, chunk, from); writeErr == nil {
				_, writeErr = w.Write(out)
			}
		}
	})
	if err != nil {
		return err
	}
	return writeErr
}

// writeConfig writes config.json: the source's fields (opts.From) less those about the model's
// math, and the model's (Layout.Config).
func writeConfig(dir string, layout Layout, opts ExportOptions) error {
	fields := map[string]any{}
	if opts.From != "" {
		raw, err := readJSON(filepath.Join(opts.From, ConfigFile))
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			return err
		}
		if err == nil {
			var source map[string]json.RawMessage
			if err := json.Unmarshal(raw, &source); err != nil {
				return fmt.Errorf("%s: %w", filepath.Join(opts.From, ConfigFile), err)
			}
			for k, v := range source {
				fields[k] = v
			}
		}
	}
	// Fields that describe the math in other words (transformers 5's, Mistral's), or another
	// writer: the model's fields below replace them.
	for _, k := range []string{"rope_parameters", "dtype", "sliding_window", "transformers_version", "pretraining_tp"} {
		delete(fields, k)
	}
	for k, v := range layout.Config() {
		fields[k] = v
	}
	fields["torch_dtype"] = torchDType[opts.DType]
	raw, err := json.MarshalIndent(fields, "", "  ")
	if err != nil {
		return err
	}
	return writeFileAtomic(filepath.Join(dir, ConfigFile), append(raw, '\n'))
}

// jsonFloat is a float64 that JSON always spells as a float ("8.0", not "8"), as Python writes
// floats: transformers' checks of rope_scaling warn about an integer factor.
type jsonFloat float64

// MarshalJSON writes the shortest decimal that reads back as f, with a ".0" if it would look like
// an integer.
func (f jsonFloat) MarshalJSON() ([]byte, error) {
	s := strconv.FormatFloat(float64(f), 'g', -1, 64)
	if !strings.ContainsAny(s, ".eEn") {
		s += ".0"
	}
	return []byte(s), nil
}

// copyCarried copies the tokenizer and generation files of from (if any) into dir, and adds
// their names to written.
func copyCarried(dir, from string, written map[string]bool) error {
	if from == "" {
		return nil
	}
	for _, name := range carried {
		raw, err := regularfile.ReadLinked(filepath.Join(from, name), regularfile.MaxSmallBytes)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return err
		}
		if err := writeFileAtomic(filepath.Join(dir, name), raw); err != nil {
			return err
		}
		written[name] = true
	}
	return nil
}

// removeStale removes weights files in dir that this export did not write.
func removeStale(dir string, written map[string]bool) error {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	for _, e := range entries {
		if !e.IsDir() && weightFile.MatchString(e.Name()) && !written[e.Name()] {
			if err := os.Remove(filepath.Join(dir, e.Name())); err != nil {
				return err
			}
		}
	}
	return nil
}

// writeFileAtomic writes data to path whole or not at all.
func writeFileAtomic(path string, data []byte) error {
	return atomicfile.Write(path, func(w io.Writer) error { _, err := w.Write(data); return err })
}
