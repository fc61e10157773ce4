package safetensors_test

import (
	"encoding/binary"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"

	"github.com/onegpu/onegpu/hf/safetensors"
)

// Write a file with one float32 tensor, then read it back.
func Example() {
	dir, _ := os.MkdirTemp("", "safetensors")
	defer os.RemoveAll(dir)
	path := filepath.Join(dir, "model.safetensors")
	values := []float32{1, 2, 3, 4, 5, 6}
	err := safetensors.WriteFile(path, []safetensors.Tensor{{
		Name: "model.norm.weight", DType: safetensors.F32, Shape: []int{2, 3},
		Data: func(w io.Writer) error { return binary.Write(w, binary.LittleEndian, values) },
	}}, map[string]string{"format": "pt"})
	if err != nil {
		panic(err)
	}

	f, err := safetensors.Open(path)
	if err != nil {
		panic(err)
	}
	defer f.Close()
	for _, t := range f.Tensors {
		fmt.Println(t.Name, t.DType, t.Shape, t.Bytes(), "bytes")
	}
	raw, _ := f.ReadTensor("model.norm.weight")
	fmt.Println(math.Float32frombits(binary.LittleEndian.Uint32(raw[20:])))
	// Output:
	// model.norm.weight F32 [2 3] 24 bytes
	// 6
}
