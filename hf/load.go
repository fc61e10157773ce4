package hf

import (
	"bytes"
	"fmt"
	"path/filepath"
	"regexp"
	"slices"
	"strings"

	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/gomlx/gomlx/pkg/core/shapes"
	"github.com/gomlx/gomlx/pkg/core/tensors"
	"github.com/gomlx/gomlx/pkg/ml/context"

	"github.com/onegpu/onegpu/hf/safetensors"
	"github.com/onegpu/onegpu/models"
)

// chunkBytes is how much of a tensor is read and converted at a time when the file is not mapped.
const chunkBytes = 1 << 20

// derived matches tensors some checkpoints carry that the model computes from its config (older
// conversions saved the rotary inverse frequencies); Load skips them, as transformers does.
var derived = regexp.MustCompile(`^model\.layers\.\d+\.self_attn\.rotary_emb\.inv_freq$`)

// Load reads the Hugging Face checkpoint in dir, config.json (ReadConfig) and its safetensors
// weights (LoadWeights), into ctx's variables in param dtype, and returns its config.
func Load(ctx *context.Context, dir string, param dtypes.DType) (models.LlamaConfig, error) {
	c, err := ReadConfig(dir)
	if err != nil {
		return c, err
	}
	return c, LoadWeights(ctx, dir, c, param)
}

// loadItem is one tensor to load: where it is and the variable it goes to.
type loadItem struct {
	spec     TensorSpec
	info     safetensors.TensorInfo
	file     *safetensors.File
	variable *context.Variable // nil: created
	dtype    dtypes.DType
}

// LoadWeights reads the weights of dir (model.safetensors, or the shards model.safetensors.index.json
// names; float32, bfloat16, float16 or float64) into the variables of a Llama of config c under
// ctx's scope, by Hugging Face's names (LlamaTensors, VariableOf). Variables that do not exist yet
// are created in param dtype (float32, bfloat16, float16 or float64); existing ones keep their
// dtype and shape and get the checkpoint's values. Values are rounded to nearest (ties to even)
// when the dtypes differ.
//
// Everything is checked before any variable is touched: a tensor missing from the files, one the
// model does not have (each named), a shape other than the config's (both shapes named) or a
// dtype that is not floating point is an error, and ctx is left as it was. Tensors the model
// derives from its config (rotary_emb.inv_freq) are skipped; with tied embeddings an lm_head.weight
// equal to the embeddings is accepted, a different one refused.
//
// Files are memory-mapped where the platform allows it and each tensor is converted straight into
// its variable's tensor (by 1 MiB chunks when not mapped): beyond the variables themselves, loading
// holds no more than one chunk in Go memory.
func LoadWeights(ctx *context.Context, dir string, c models.LlamaConfig, param dtypes.DType) error {
	if _, ok := fileTypes[param]; !ok {
		return fmt.Errorf("loading %s: param dtype %s is not a floating-point dtype (float32, bfloat16, float16 or float64)", dir, param)
	}
	w, err := openWeights(dir)
	if err != nil {
		return err
	}
	defer w.Close()
	if err := w.checkImplied(c); err != nil {
		return err
	}
	items, err := plan(ctx, w, c, param)
	if err != nil {
		return err
	}
	for _, it := range items {
		value, err := readTensor(it)
		if err != nil {
			return err
		}
		if it.variable != nil {
			if err := it.variable.SetValue(value); err != nil {
				return fmt.Errorf("setting variable %s from %s: %w", it.variable.ScopeAndName(), it.spec.Name, err)
			}
			continue
		}
		scope, name := VariableOf(ctx, it.spec.Name)
		scope.Checked(false).VariableWithValue(name, value)
	}
	return nil
}

// CheckWeights returns the error LoadWeights would return for the weights of dir and config c,
// reading only the files' headers: a run checks its checkpoint with it before it builds a model
// of c (a config.json that asks for more layers or parameters than the weights hold is refused
// at once, without building anything of its size).
func CheckWeights(dir string, c models.LlamaConfig) error {
	w, err := openWeights(dir)
	if err != nil {
		return err
	}
	defer w.Close()
	if err := w.checkImplied(c); err != nil {
		return err
	}
	_, err = plan(context.New(), w, c, dtypes.Float32)
	return err
}

// plan matches the checkpoint's tensors with the model's and checks every one before anything
// is read.
func plan(ctx *context.Context, w *weights, c models.LlamaConfig, param dtypes.DType) ([]loadItem, error) {
	specs := LlamaTensors(c)
	expected := map[string]bool{}
	var items []loadItem
	var missing, problems []string
	for _, spec := range specs {
		expected[spec.Name] = true
		info, file, ok := w.info(spec.Name)
		if !ok {
			missing = append(missing, spec.Name)
			continue
		}
		it := loadItem{spec: spec, info: info, file: file, dtype: param, variable: lookupVariable(ctx, spec.Name)}
		if _, ok := variableTypes[info.DType]; !ok {
			problems = append(problems, fmt.Sprintf("tensor %s in %s is %s: onegpu reads F32, BF16, F16 or F64 weights", spec.Name, file.Path(), info.DType))
		}
		if !slices.Equal(info.Shape, spec.Shape) {
			problems = append(problems, fmt.Sprintf("tensor %s in %s has shape %v, the config gives %v", spec.Name, file.Path(), info.Shape, spec.Shape))
		}
		if v := it.variable; v != nil {
			if !slices.Equal(v.Shape().Dimensions, spec.Shape) {
				problems = append(problems, fmt.Sprintf("variable %s has shape %v, the checkpoint's %s %v: the context holds another model", v.ScopeAndName(), v.Shape().Dimensions, spec.Name, spec.Shape))
			}
			if _, ok := fileTypes[v.DType()]; !ok {
				problems = append(problems, fmt.Sprintf("variable %s is %s, not a floating-point dtype", v.ScopeAndName(), v.DType()))
			}
			it.dtype = v.DType()
		}
		items = append(items, it)
	}
	var extra []string
	for _, name := range w.names() {
		switch {
		case expected[name] || derived.MatchString(name):
		case name == "lm_head.weight" && c.TiedEmbeddings:
			if err := sameTensor(w, name, "model.embed_tokens.weight"); err != nil {
				problems = append(problems, fmt.Sprintf("%v: with tie_word_embeddings the output layer is the embedding table", err))
			}
		default:
			extra = append(extra, name)
		}
	}
	where := w.dir
	if len(missing) > 0 {
		problems = append(problems, fmt.Sprintf("%d tensors the model needs are missing: %s", len(missing), list(missing)))
	}
	if len(extra) > 0 {
		problems = append(problems, fmt.Sprintf("%d tensors are not part of a Llama of this config (config.json): %s", len(extra), list(extra)))
	}
	if len(problems) > 0 {
		return nil, fmt.Errorf("checkpoint %s does not fit the model (nothing was loaded):\n  %s", where, strings.Join(problems, "\n  "))
	}
	return items, nil
}

// list joins names, the first 8 of them.
func list(names []string) string {
	if len(names) > 8 {
		return strings.Join(names[:8], ", ") + fmt.Sprintf(" and %d more", len(names)-8)
	}
	return strings.Join(names, ", ")
}

// sameTensor returns nil when the checkpoint's tensors a and b have the same dtype, shape and
// bytes (compared chunk by chunk).
func sameTensor(w *weights, a, b string) error {
	ia, fa, _ := w.info(a)
	ib, fb, ok := w.info(b)
	if !ok || ia.DType != ib.DType || !slices.Equal(ia.Shape, ib.Shape) {
		return fmt.Errorf("%s (%s%v) is not a copy of %s", a, ia.DType, ia.Shape, b)
	}
	ra, err := fa.Reader(a)
	if err != nil {
		return err
	}
	rb, err := fb.Reader(b)
	if err != nil {
		return err
	}
	bufA, bufB := make([]byte, min(chunkBytes, ra.Size())), make([]byte, min(chunkBytes, ra.Size()))
	for off := int64(0); off < ra.Size(); off += int64(len(bufA)) {
		n := min(int64(len(bufA)), ra.Size()-off)
		if _, err := ra.ReadAt(bufA[:n], off); err != nil {
			return err
		}
		if _, err := rb.ReadAt(bufB[:n], off); err != nil {
			return err
		}
		if !bytes.Equal(bufA[:n], bufB[:n]) {
			return fmt.Errorf("%s differs from %s", a, b)
		}
	}
	return nil
}

// readTensor converts one checkpoint tensor into a new tensor of the item's dtype.
func readTensor(it loadItem) (*tensors.Tensor, error) {
	value := tensors.FromShape(shapes.Make(it.dtype, it.spec.Shape...))
	to := fileTypes[it.dtype]
	var convErr error
	err := value.MutableBytes(func(dst []byte) {
		pos := 0
		convErr = it.file.Chunks(it.spec.Name, chunkBytes, func(chunk []byte) error {
			n := len(chunk) / valueBytes(it.info.DType) * valueBytes(to)
			if err := convert(dst[pos:pos+n], to, chunk, it.info.DType); err != nil {
				return err
			}
			pos += n
			return nil
		})
	})
	if err == nil {
		err = convErr
	}
	if err != nil {
		return nil, fmt.Errorf("reading %s from %s: %w", it.spec.Name, filepath.Base(it.file.Path()), err)
	}
	return value, nil
}
