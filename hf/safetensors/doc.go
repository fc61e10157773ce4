// Package safetensors reads and writes Hugging Face's safetensors files: an 8-byte little-endian
// header length, a JSON header naming each tensor's dtype, shape and byte range (and optional
// string metadata), then the tensors' raw little-endian bytes, back to back.
//
// Reading maps the file where the platform allows it (else reads by offset) and validates the
// header strictly before any data is touched; tensors are read on demand, in chunks, so a
// multi-gigabyte checkpoint never sits whole in Go memory. Writing streams tensor by tensor, in the
// reference implementation's order and padding, so a file written here is byte for byte the one
// Python's safetensors 0.8.0 writes from the same tensors.
//
//	f, err := safetensors.Open("model.safetensors")
//	if err != nil { ... }
//	defer f.Close()
//	for _, t := range f.Tensors {
//		fmt.Println(t.Name, t.DType, t.Shape) // model.embed_tokens.weight F32 [256 64]
//	}
//	raw, err := f.ReadTensor("model.norm.weight")
//
// Why not a served module: github.com/nlpodyssey/safetensors (the one pure-Go reader the module
// proxy serves, an untagged 2025 snapshot) deserializes from a byte slice of the whole file and
// serializes from in-memory views, and github.com/gomlx/go-huggingface (v0.3.1) has no safetensors
// code; the format is small enough to implement with fuzzing and a byte-for-byte check against
// Python's writer.
package safetensors
