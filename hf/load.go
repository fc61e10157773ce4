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
)

// chunkBytes is how much of a tensor is read and converted at a time when the file is not mapped.
const chunkBytes = 1 << 20

// derived matches tensors some checkpoints carry that the model computes from its config (older
// conversions saved the rotary inverse frequencies); Load skips them, as transformers does.
var derived = regexp.MustCompile(`^model\.layers\.\d+\.self_attn\.rotary_emb\.inv_freq$`)

// Pretrained is a Hugging Face folder opened by Open: the model config.json describes and its
// weights.
type Pretrained struct {
	// Dir is the folder.
	Dir string
	// Model is the onegpu model (Layout.Model(): a train.Model, such as a models.Llama; hf sits
	// below train and cannot name that interface).
	Model any
	// Layout is how the folder holds the model: its family's tensors and config.json fields.
	Layout Layout
	// Ctx holds the weights, under the names the model reads, in Reuse mode: a variable the model
	// asks for and the folder lacks is an error, not a fresh random weight.
	Ctx *context.Context
}

// Open is the one way onegpu loads a Hugging Face folder (a checkpoint transformers'
// save_pretrained wrote): it reads config.json into the model its family describes
// (ReadConfig, at sequence length seq; 0 for DefaultSeqLen capped at the model's positions),
// then the safetensors weights (model.safetensors, or the shards of model.safetensors.index.json;
// float32, bfloat16, float16 or float64) into ctx's variables under ctx's scope by their Hugging
// Face names: new variables in param dtype, existing ones in their own, rounded to nearest. A
// missing, extra or misshapen tensor, or a config.json asking for more layers than the files
// hold, is an error naming it before any variable changes; beyond the variables, loading holds
// one 1 MiB chunk in Go memory (the files are memory-mapped where the platform allows). Give a
// new context (context.New()) for a model of its own, or the context a trainer trains
// (train.Trainer.SetWeights) to start a run from the weights. OpenWith takes the weights one at a
// time instead (a Sink: a frozen base hashed and quantized as it is read).
//
//	p, err := hf.Open(context.New(), "Qwen2.5-0.5B", dtypes.Float32, 512)
//	m := &train.Loaded{Model: p.Model.(train.Model), Policy: f32, Backend: backend, Ctx: p.Ctx}
//	loss, metrics, err := m.Loss(batch)
func Open(ctx *context.Context, dir string, param dtypes.DType, seq int) (*Pretrained, error) {
	return OpenWith(ctx, dir, Options{DType: param, Seq: seq})
}

// Options are how OpenWith reads a folder.
type Options struct {
	// DType is the dtype of the variables it creates and of the weights a Sink takes: float32,
	// bfloat16, float16 or float64 (existing variables keep theirs).
	DType dtypes.DType
	// Seq is the sequence length the model is built for (0: DefaultSeqLen capped at the model's
	// positions).
	Seq int
	// Sink, when set, receives the weights one at a time as they are read.
	Sink Sink
}

// A Sink receives a folder's weights one at a time, in the order of their variables' full names
// (Variable.ScopeAndName, in Go's string order), each in its variable's dtype: what a run does
// with its base as it is loaded (hashes it, quantizes it) instead of after the whole model is in
// memory. train.BaseWeights is one (train.Trainer.SetBase).
type Sink interface {
	// Takes reports whether the sink takes the weight name of scope, of shape, instead of a
	// variable: it is read into a buffer that the next weight of its shape reuses, no variable is
	// made of it, and Add keeps what it needs of it (such as its quantized parts).
	Takes(scope *context.Context, name string, shape shapes.Shape) bool
	// Add receives each weight once it is read: the variable's value once it is set, or the value
	// alone of one it takes, valid until Add returns. An error stops the loading, leaving the
	// weights before it loaded.
	Add(scope *context.Context, name string, value *tensors.Tensor) error
}

// OpenWith is Open with its options: the variables' dtype, the sequence length, and a Sink that
// receives the weights as they are read, so that a weight the sink takes (quantizes) never
// exists as a variable and loading holds one of each shape it takes at a time. The checks are
// Open's, made before any variable changes; an error of the sink stops the loading midway.
func OpenWith(ctx *context.Context, dir string, o Options) (*Pretrained, error) {
	layout, err := ReadConfig(dir, o.Seq)
	if err != nil {
		return nil, err
	}
	if err := loadWeights(ctx, dir, layout, o); err != nil {
		return nil, err
	}
	return &Pretrained{Dir: dir, Model: layout.Model(), Layout: layout, Ctx: ctx.Reuse()}, nil
}

// loadItem is one tensor to load: where it is and the variable it goes to.
type loadItem struct {
	spec     TensorSpec
	info     safetensors.TensorInfo
	file     *safetensors.File
	variable *context.Variable // nil: created
	dtype    dtypes.DType
	scope    *context.Context // the variable's scope and name
	name     string
	taken    bool // by the Sink: no variable
}

// path is the item's variable's full name (Variable.ScopeAndName).
func (it loadItem) path() string { return context.JoinScope(it.scope.Scope(), it.name) }

// loadWeights reads the weights of dir (model.safetensors, or the shards model.safetensors.index.json
// names; float32, bfloat16, float16 or float64) into the variables of the model layout describes
// under ctx's scope, by Hugging Face's names (Layout.Tensors, VariableOf). Variables that do not exist yet
// are created in o.DType (float32, bfloat16, float16 or float64); existing ones keep their
// dtype and shape and get the checkpoint's values. Values are rounded to nearest (ties to even)
// when the dtypes differ. With o.Sink the tensors are read in the order of their variables' full
// names, each given to the sink; one it takes is read into a buffer of its shape instead of a
// variable.
//
// Everything is checked before any variable is touched: a tensor missing from the files, one the
// model does not have (each named), a shape other than the config's (both shapes named) or a
// dtype that is not floating point is an error, and ctx is left as it was. Tensors the model
// derives from its config (rotary_emb.inv_freq) are skipped; a tensor the layout aliases to
// another (lm_head.weight with tied embeddings) is accepted when it equals it, refused otherwise.
//
// Files are memory-mapped where the platform allows it and each tensor is converted straight into
// its variable's tensor (by 1 MiB chunks when not mapped): beyond the variables themselves, loading
// holds no more than one chunk in Go memory, and the sink's buffers.
func loadWeights(ctx *context.Context, dir string, layout Layout, o Options) error {
	if _, ok := fileTypes[o.DType]; !ok {
		return fmt.Errorf("loading %s: param dtype %s is not a floating-point dtype (float32, bfloat16, float16 or float64)", dir, o.DType)
	}
	w, err := openWeights(dir)
	if err != nil {
		return err
	}
	defer w.Close()
	if err := w.checkImplied(layout); err != nil {
		return err
	}
	items, err := plan(ctx, w, layout, o)
	if err != nil {
		return err
	}
	buffers := map[string]*tensors.Tensor{} // the sink's, by shape
	for _, it := range items {
		var value *tensors.Tensor
		if it.taken {
			shape := shapes.Make(it.dtype, it.spec.Shape...)
			if buffers[shape.String()] == nil {
				buffers[shape.String()] = tensors.FromShape(shape)
			}
			value = buffers[shape.String()]
		} else {
			value = tensors.FromShape(shapes.Make(it.dtype, it.spec.Shape...))
		}
		if err := readTensor(it, value); err != nil {
			return err
		}
		switch {
		case it.taken:
		case it.variable != nil:
			if err := it.variable.SetValue(value); err != nil {
				return fmt.Errorf("setting variable %s from %s: %w", it.variable.ScopeAndName(), it.spec.Name, err)
			}
		default:
			it.scope.Checked(false).VariableWithValue(it.name, value)
		}
		if o.Sink != nil {
			if err := o.Sink.Add(it.scope, it.name, value); err != nil {
				return fmt.Errorf("loading %s (%s): %w", it.spec.Name, it.path(), err)
			}
		}
	}
	return nil
}

// CheckWeights returns the error Open would return for the weights of dir and the model
// layout describes, reading only the files' headers: a run checks its checkpoint with it before it
// builds the model (a config.json that asks for more layers or parameters than the weights hold is
// refused at once, without building anything of its size).
func CheckWeights(dir string, layout Layout) error {
	w, err := openWeights(dir)
	if err != nil {
		return err
	}
	defer w.Close()
	if err := w.checkImplied(layout); err != nil {
		return err
	}
	_, err = plan(context.New(), w, layout, Options{DType: dtypes.Float32})
	return err
}

// plan matches the checkpoint's tensors with the model's and checks every one before anything
// is read; with o.Sink it orders them by their variables' full names and marks those it takes.
func plan(ctx *context.Context, w *weights, layout Layout, o Options) ([]loadItem, error) {
	specs, aliases := layout.Tensors(), layout.Aliases()
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
		it := loadItem{spec: spec, info: info, file: file, dtype: o.DType, variable: lookupVariable(ctx, spec.Name)}
		it.scope, it.name = VariableOf(ctx, spec.Name)
		if o.Sink != nil && o.Sink.Takes(it.scope, it.name, shapes.Make(it.dtype, spec.Shape...)) {
			it.taken = true
			if it.variable != nil {
				problems = append(problems, fmt.Sprintf("variable %s exists, and the weights' sink takes %s instead of a variable: load into a context without it", it.variable.ScopeAndName(), spec.Name))
			}
		}
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
		case aliases[name] != "":
			if err := sameTensor(w, name, aliases[name]); err != nil {
				problems = append(problems, fmt.Sprintf("%v: the model holds one tensor for both (tie_word_embeddings: the output layer is the embedding table)", err))
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
		problems = append(problems, fmt.Sprintf("%d tensors are not part of the %v model config.json describes: %s", len(extra), layout.Config()["model_type"], list(extra)))
	}
	if len(problems) > 0 {
		return nil, fmt.Errorf("checkpoint %s does not fit the model (nothing was loaded):\n  %s", where, strings.Join(problems, "\n  "))
	}
	if o.Sink != nil {
		slices.SortFunc(items, func(a, b loadItem) int { return strings.Compare(a.path(), b.path()) })
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

// readTensor converts one checkpoint tensor into value, a tensor of the item's dtype and shape.
func readTensor(it loadItem, value *tensors.Tensor) error {
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
		return fmt.Errorf("reading %s from %s: %w", it.spec.Name, filepath.Base(it.file.Path()), err)
	}
	return nil
}
