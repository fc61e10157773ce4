package hf

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"

	"github.com/onegpu/onegpu/hf/safetensors"
)

// The file names of a Hugging Face checkpoint's weights: one file, or an index naming the shard
// that holds each tensor.
const (
	SingleFile = "model.safetensors"
	IndexFile  = "model.safetensors.index.json"
)

// weights is the open safetensors file(s) of a checkpoint folder and where each tensor is.
type weights struct {
	dir   string
	files []*safetensors.File
	where map[string]*safetensors.File // tensor name -> the file holding it
}

// index is model.safetensors.index.json.
type index struct {
	Metadata  map[string]any    `json:"metadata"`
	WeightMap map[string]string `json:"weight_map"`
}

// openWeights opens the weights of dir: model.safetensors when present (as transformers prefers
// it), else the shards model.safetensors.index.json names. It checks that the index and the
// shards agree: every tensor the index lists is in the shard it names, and every tensor of a shard
// is listed, there.
func openWeights(dir string) (_ *weights, err error) {
	w := &weights{dir: dir, where: map[string]*safetensors.File{}}
	defer func() {
		if err != nil {
			w.Close()
		}
	}()
	single := filepath.Join(dir, SingleFile)
	if _, err := os.Lstat(single); err == nil { // whatever it is: Open says what is wrong with it
		f, err := safetensors.Open(single)
		if err != nil {
			return nil, err
		}
		w.files = append(w.files, f)
		for _, t := range f.Tensors {
			w.where[t.Name] = f
		}
		return w, nil
	}
	if _, err := os.Lstat(filepath.Join(dir, IndexFile)); errors.Is(err, fs.ErrNotExist) {
		return nil, noWeightsError(dir)
	}
	raw, err := readJSON(filepath.Join(dir, IndexFile))
	if err != nil {
		return nil, err
	}
	var idx index
	dec := json.NewDecoder(strings.NewReader(string(raw)))
	if err := dec.Decode(&idx); err != nil {
		return nil, fmt.Errorf("%s: %w", filepath.Join(dir, IndexFile), err)
	}
	if len(idx.WeightMap) == 0 {
		return nil, fmt.Errorf("%s: no weight_map (tensor name -> shard file)", filepath.Join(dir, IndexFile))
	}
	shards := map[string]*safetensors.File{}
	var names []string
	for name := range idx.WeightMap {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		shard := idx.WeightMap[name]
		if shard == "" || filepath.Base(shard) != shard || shard == "." || shard == ".." {
			return nil, fmt.Errorf("%s: tensor %q is in shard %q, not a file name in the folder", filepath.Join(dir, IndexFile), name, shard)
		}
		f, ok := shards[shard]
		if !ok {
			if f, err = safetensors.Open(filepath.Join(dir, shard)); err != nil {
				return nil, fmt.Errorf("%s names shard %s: %w", IndexFile, shard, err)
			}
			shards[shard] = f
			w.files = append(w.files, f)
		}
		if _, ok := f.Tensor(name); !ok {
			return nil, fmt.Errorf("%s puts tensor %q in %s, which does not hold it", filepath.Join(dir, IndexFile), name, shard)
		}
		w.where[name] = f
	}
	for shard, f := range shards {
		for _, t := range f.Tensors {
			if w.where[t.Name] != f {
				return nil, fmt.Errorf("%s holds tensor %q, which %s does not map to it", filepath.Join(dir, shard), t.Name, IndexFile)
			}
		}
	}
	return w, nil
}

// noWeightsError says what dir holds instead of safetensors weights.
func noWeightsError(dir string) error {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	var names []string
	pickle := false
	for _, e := range entries {
		names = append(names, e.Name())
		ext := filepath.Ext(e.Name())
		pickle = pickle || ext == ".bin" || ext == ".pt" || ext == ".pth"
	}
	msg := fmt.Sprintf("%s holds neither %s nor %s (it holds: %s)", dir, SingleFile, IndexFile, strings.Join(names, ", "))
	if pickle {
		msg += "; PyTorch pickle files (.bin, .pt, .pth) are not read: save the model with save_pretrained(..., safe_serialization=True) to get safetensors"
	}
	return errors.New(msg)
}

// Close closes the files.
func (w *weights) Close() {
	for _, f := range w.files {
		f.Close()
	}
	w.files = nil
}

// info returns the tensor called name and the file holding it.
func (w *weights) info(name string) (safetensors.TensorInfo, *safetensors.File, bool) {
	f, ok := w.where[name]
	if !ok {
		return safetensors.TensorInfo{}, nil, false
	}
	t, _ := f.Tensor(name)
	return t, f, true
}

// names lists the tensors of the checkpoint, sorted.
func (w *weights) names() []string {
	names := make([]string, 0, len(w.where))
	for n := range w.where {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// layerName matches the tensors of a numbered layer, for counting the layers the files hold.
var layerName = regexp.MustCompile(`^model\.layers\.(\d+)\.`)

// checkImplied refuses a model that asks for more layers than the files hold, before anything is
// built from it: a config.json of 10^9 layers with a small folder of weights would otherwise
// allocate the names of 9·10^9 tensors (Layout.Tensors), or build a step of 10^9 layers, before
// any tensor was found missing. (Fewer tensors within the layers present are plan's to name one by
// one.) The model's counts in the message come from its layout's closed forms (Layers, Params),
// never from a list of its size.
func (w *weights) checkImplied(layout Layout) error {
	var haveParams int64
	layers := 0
	for name := range w.where {
		info, _, _ := w.info(name)
		haveParams += info.Elements()
		if m := layerName.FindStringSubmatch(name); m != nil {
			if i, err := strconv.Atoi(m[1]); err == nil {
				layers = max(layers, i+1)
			}
		}
	}
	if layout.Layers() <= layers {
		return nil
	}
	return fmt.Errorf("checkpoint %s does not fit the model (nothing was loaded): %s describes %d layers, %d parameters; "+
		"the weights hold %d layers, %d tensors of %d parameters: config.json does not describe these weights "+
		"(num_hidden_layers and the sizes must be those the weights were saved with)",
		w.dir, ConfigFile, layout.Layers(), layout.Params(), layers, len(w.where), haveParams)
}
