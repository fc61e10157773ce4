package data

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/onegpu/onegpu/hf/safetensors"
)

// The tokenized data is cached, so that a run that resumes, or another run on the same data,
// does not tokenize again: a safetensors file "tokenized-KEY.safetensors" with the Tokenized's
// three arrays ("ids" int32, "trained" uint8, "starts" int64), KEY naming the data's SHA-256,
// the format and the tokenizer's SHA-256 (cacheKey), which its metadata repeats.

// cacheVersion changes whenever the cached arrays would (how documents are tokenized).
const cacheVersion = "1"

// cacheKey is the hash that names a cache file: the data's and the tokenizer's SHA-256 and the
// format that made documents of the data.
func cacheKey(dataSHA, tokenizerSHA [32]byte, format TextFormat) string {
	h := sha256.New()
	fmt.Fprintf(h, "onegpu tokenized v%s\ndata %x\ntokenizer %x\nseparator %q\ntemplate %q\n", cacheVersion, dataSHA, tokenizerSHA,
		format.Separator, format.Template)
	return hex.EncodeToString(h.Sum(nil))
}

// cachePath is the cache file of key in dir.
func cachePath(dir, key string) string {
	return filepath.Join(dir, "tokenized-"+key[:32]+".safetensors")
}

// readCache returns the Tokenized cached at path under key, or nil when there is none or it is
// not one this version wrote for key (it is then written again).
func readCache(path, key string) *Tokenized {
	f, err := safetensors.Open(path)
	if err != nil {
		return nil
	}
	defer f.Close()
	if f.Header.Metadata["key"] != key {
		return nil
	}
	t := &Tokenized{}
	ids, err1 := f.ReadTensor("ids")
	trained, err2 := f.ReadTensor("trained")
	starts, err3 := f.ReadTensor("starts")
	if err1 != nil || err2 != nil || err3 != nil || len(ids) != 4*len(trained) || len(starts)%8 != 0 || len(starts) < 8 {
		return nil
	}
	t.IDs = make([]int32, len(trained))
	t.Starts = make([]int64, len(starts)/8)
	_, _ = binary.Decode(ids, binary.LittleEndian, t.IDs)
	_, _ = binary.Decode(starts, binary.LittleEndian, t.Starts)
	t.Trained = trained
	if t.Starts[0] != 0 || t.Starts[len(t.Starts)-1] != int64(len(t.IDs)) {
		return nil
	}
	for i := 1; i < len(t.Starts); i++ {
		if t.Starts[i] < t.Starts[i-1] {
			return nil
		}
	}
	return t
}

// writeCache writes t to path (whole or not at all) under key, with what made it as metadata.
func writeCache(path, key string, t *Tokenized, metadata map[string]string) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	meta := map[string]string{"key": key, "onegpu": "tokenized v" + cacheVersion}
	for k, v := range metadata {
		meta[k] = v
	}
	raw := func(v any) func(w io.Writer) error {
		return func(w io.Writer) error { return binary.Write(w, binary.LittleEndian, v) }
	}
	return safetensors.WriteFile(path, []safetensors.Tensor{
		{Name: "ids", DType: safetensors.I32, Shape: []int{len(t.IDs)}, Data: raw(t.IDs)},
		{Name: "trained", DType: safetensors.U8, Shape: []int{len(t.Trained)}, Data: raw(t.Trained)},
		{Name: "starts", DType: safetensors.I64, Shape: []int{len(t.Starts)}, Data: raw(t.Starts)},
	}, meta)
}
