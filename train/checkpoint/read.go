package checkpoint

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"math"
	"path/filepath"

	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/gomlx/gomlx/pkg/ml/context/checkpoints"

	"github.com/onegpu/onegpu/internal/regularfile"
)

// A checkpoint's files are read only as regular files (never through a link, never a named pipe
// or a device: a .bin linked to /dev/zero would fill the memory, a FIFO would hang), and only
// once their sizes agree with the manifest: the .json's recorded size (or at most
// maxMetadataBytes for manifests that did not record it), then the .bin's, which must also be the
// sum of the sizes of the variables the .json lists.

// maxMetadataBytes bounds the .json of a checkpoint whose manifest does not record its size: the
// metadata of a Llama of 8B parameters is under 200 KB.
const maxMetadataBytes = 64 << 20

// metadata is what onegpu reads of GoMLX's .json of a checkpoint.
type metadata struct {
	Variables []struct {
		ParameterName string
		Dimensions    []int
		DType         dtypes.DType
		Pos, Length   int
	}
	BinFormat string
}

// checkpointFiles is what read returns: the checked manifest, the parsed metadata and both files'
// bytes.
type checkpointFiles struct {
	manifest  *manifest
	meta      metadata
	jsonBytes []byte
	bin       []byte
}

// read reads a checkpoint's three files, checking each's kind and size before reading it and its
// checksum after.
func (c *Folder) read(base string) (*checkpointFiles, error) {
	path := filepath.Join(c.dir, base)
	m, err := readManifest(path + manifestSuffix)
	if err != nil {
		return nil, fmt.Errorf("no manifest written whole by onegpu: %w", err)
	}
	var jsonBytes []byte
	if m.JSONBytes > 0 {
		jsonBytes, err = regularfile.ReadExactly(path+checkpoints.JsonNameSuffix, m.JSONBytes)
	} else {
		jsonBytes, err = regularfile.ReadAtMost(path+checkpoints.JsonNameSuffix, maxMetadataBytes)
	}
	if err != nil {
		return nil, fmt.Errorf("metadata: %w", err)
	}
	if sum(jsonBytes) != m.JSONSHA {
		return nil, fmt.Errorf("metadata (%d bytes) does not match its checksum: damaged or partial", len(jsonBytes))
	}
	var meta metadata
	if err := json.Unmarshal(jsonBytes, &meta); err != nil {
		return nil, fmt.Errorf("metadata: %w", err)
	}
	if meta.BinFormat != checkpoints.BinUncompressed.String() {
		return nil, fmt.Errorf("data format %q, want %q", meta.BinFormat, checkpoints.BinUncompressed)
	}
	if err := meta.checkLayout(m.BinBytes); err != nil {
		return nil, err
	}
	binPath := path + checkpoints.BinDataSuffix
	bin, err := regularfile.ReadExactly(binPath, m.BinBytes)
	if err != nil {
		return nil, fmt.Errorf("data: %w", err)
	}
	if sum(bin) != m.BinSHA {
		return nil, fmt.Errorf("data (%d bytes) does not match its checksum: damaged or partial", len(bin))
	}
	return &checkpointFiles{manifest: m, meta: meta, jsonBytes: jsonBytes, bin: bin}, nil
}

// checkLayout checks, before the data is read, that the variables' shapes and dtypes lay them out
// one after the other in exactly binBytes bytes.
func (meta metadata) checkLayout(binBytes int64) error {
	var pos int64
	for _, v := range meta.Variables {
		size, ok := elementSize(v.DType)
		if !ok {
			return fmt.Errorf("variable %s: dtype %s is not one onegpu reads", v.ParameterName, v.DType)
		}
		for _, d := range v.Dimensions {
			if d < 0 || d > 0 && size > math.MaxInt64/int64(d) {
				return fmt.Errorf("variable %s: dimensions %v do not describe a tensor onegpu can hold", v.ParameterName, v.Dimensions)
			}
			size *= int64(d)
		}
		if int64(v.Pos) != pos || int64(v.Length) != size || size > binBytes-pos {
			return fmt.Errorf("variable %s (%s %v): %d bytes at %d do not fit the %d-byte data the manifest records",
				v.ParameterName, v.DType, v.Dimensions, v.Length, v.Pos, binBytes)
		}
		pos += size
	}
	if pos != binBytes {
		return fmt.Errorf("the manifest records %d bytes of data, the variables' shapes %d", binBytes, pos)
	}
	return nil
}

// elementSize is the size in bytes of one value of dtype d; ok is false for a dtype that is not a
// whole number of bytes or that GoMLX does not know (GoMLX panics on those).
func elementSize(d dtypes.DType) (size int64, ok bool) {
	defer func() {
		if recover() != nil {
			size, ok = 0, false
		}
	}()
	if d == dtypes.InvalidDType {
		return 0, false
	}
	size = int64(d.Size())
	return size, size > 0
}

// verify checks one checkpoint: manifest, kinds and sizes of its files, checksums and finite
// values.
func (c *Folder) verify(base string) (*manifest, error) {
	files, err := c.read(base)
	if err != nil {
		return nil, err
	}
	for _, v := range files.meta.Variables {
		if i := firstNonFinite(v.DType, files.bin[v.Pos:v.Pos+v.Length]); i >= 0 {
			return nil, &NonFiniteError{Step: files.manifest.Step, Variable: v.ParameterName, Index: i}
		}
	}
	return files.manifest, nil
}

func sum(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}
