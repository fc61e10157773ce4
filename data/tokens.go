package data

import (
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"math/rand/v2"

	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/gomlx/gomlx/pkg/core/tensors"
)

// Tokens is language modelling on token ids someone tokenized already (a .npy of [sequences,
// length] ids, as numpy.save writes a tokenizer's output): each row is cut into windows of seqLen+1
// tokens (starting at 0, seqLen, 2·seqLen, ...; a window's last token starts the next one), whose
// first seqLen tokens are the inputs and last seqLen the labels. The windows are visited in an
// order drawn once from the seed, batch after batch, starting over when all are used.
type Tokens struct {
	ids           []int32 // [rows, length], row-major
	rows, length  int
	batch, seqLen int
	seed          uint64
	order         []int // window i's row*length + start
	hash          [32]byte
	name          string
}

// ReadTokens reads token ids [sequences, length] (int32 or int64) from the .npy file path and
// prepares batches of batch sequences of seqLen tokens for a model of vocabulary vocab. It returns
// an error naming the file and the fix for another dtype or rank, an id outside [0, vocab) (with
// its place), or rows too short for one window.
func ReadTokens(path string, batch, seqLen, vocab int, seed uint64) (*Tokens, error) {
	t, err := ReadNPYFile(path)
	if err != nil {
		return nil, err
	}
	d, err := NewTokens(t, batch, seqLen, vocab, seed)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	d.name = path
	return d, nil
}

// NewTokens is ReadTokens of a tensor of ids [sequences, length] (int32 or int64).
func NewTokens(t *tensors.Tensor, batch, seqLen, vocab int, seed uint64) (*Tokens, error) {
	if err := checkDataSizes("token ids", size{"batch", batch}, size{"sequence length", seqLen}); err != nil {
		return nil, err
	}
	if t.Rank() != 2 || (t.DType() != dtypes.Int32 && t.DType() != dtypes.Int64) {
		return nil, fmt.Errorf("token ids must be int32 or int64 [sequences, length], got %s: save them with numpy.save(path, ids.astype(numpy.int32))", t.Shape())
	}
	rows, length := t.Shape().Dim(0), t.Shape().Dim(1)
	if length < seqLen+1 {
		return nil, fmt.Errorf("sequences of %d tokens are too short to train on sequences of %d (a window is the inputs and one token more for the last target): "+
			"use --seq %d or less, or longer sequences", length, seqLen, max(length-1, 0))
	}
	if rows == 0 {
		return nil, fmt.Errorf("no sequences (shape %s)", t.Shape())
	}
	ids := make([]int32, rows*length)
	var bad error
	check := func(i int, v int64) {
		if bad == nil && (v < 0 || v >= int64(vocab)) {
			bad = fmt.Errorf("token id %d at [%d, %d] is outside the model's vocabulary [0, %d)", v, i/length, i%length, vocab)
		}
		ids[i] = int32(v)
	}
	t.MustConstFlatData(func(flat any) {
		switch flat := flat.(type) {
		case []int32:
			for i, v := range flat {
				check(i, int64(v))
			}
		case []int64:
			for i, v := range flat {
				check(i, v)
			}
		}
	})
	if bad != nil {
		return nil, bad
	}
	d := &Tokens{ids: ids, rows: rows, length: length, batch: batch, seqLen: seqLen, seed: seed}
	for r := range rows {
		for start := 0; start+seqLen+1 <= length; start += seqLen {
			d.order = append(d.order, r*length+start)
		}
	}
	rand.New(rand.NewPCG(seed, 0x70ce)).Shuffle(len(d.order), func(i, j int) { d.order[i], d.order[j] = d.order[j], d.order[i] })
	h := sha256.New()
	_ = binary.Write(h, binary.LittleEndian, []int64{int64(rows), int64(length)})
	_ = binary.Write(h, binary.LittleEndian, ids)
	copy(d.hash[:], h.Sum(nil))
	return d, nil
}

// Windows is the number of windows of seqLen+1 tokens the ids hold.
func (d *Tokens) Windows() int { return len(d.order) }

// Batch returns the step-th batch: windows step·batch to step·batch+batch-1 of the drawn order
// (modulo their number), as inputs and labels [batch, seqLen] int32.
func (d *Tokens) Batch(step int) []*tensors.Tensor {
	inputs := make([]int32, d.batch*d.seqLen)
	labels := make([]int32, d.batch*d.seqLen)
	for b := range d.batch {
		at := d.order[(step*d.batch+b)%len(d.order)]
		copy(inputs[b*d.seqLen:(b+1)*d.seqLen], d.ids[at:at+d.seqLen])
		copy(labels[b*d.seqLen:(b+1)*d.seqLen], d.ids[at+1:at+d.seqLen+1])
	}
	return []*tensors.Tensor{tensors.FromFlatDataAndDimensions(inputs, d.batch, d.seqLen),
		tensors.FromFlatDataAndDimensions(labels, d.batch, d.seqLen)}
}

// Record is what a checkpoint records of this data (see train.DataRecord): the ids' shape and
// SHA-256, and the seed that orders the windows.
func (d *Tokens) Record() string {
	return fmt.Sprintf("token ids [%d, %d], sha256 %x, windows of %d ordered with seed %d", d.rows, d.length, d.hash, d.seqLen+1, d.seed)
}

func (d *Tokens) Describe() string {
	name := "token ids"
	if d.name != "" {
		name = d.name
	}
	return fmt.Sprintf("%s: %d sequences of %d tokens, %d windows of %d, batches of %d", name, d.rows, d.length, len(d.order), d.seqLen+1, d.batch)
}

// Rows is the number of sequences of the ids, Length their length in tokens.
func (d *Tokens) Rows() int { return d.rows }

// Length is the length of every sequence of the ids, in tokens.
func (d *Tokens) Length() int { return d.length }

// Sequences returns whole sequences from to to-1 for evaluation: inputs, each sequence without its
// last token, and labels, without its first, [to-from, Length-1] int32.
func (d *Tokens) Sequences(from, to int) []*tensors.Tensor {
	if from < 0 || to > d.rows || from >= to {
		panic(fmt.Sprintf("data.Tokens.Sequences(%d, %d): want 0 <= from < to <= %d", from, to, d.rows))
	}
	n, l := to-from, d.length-1
	inputs, labels := make([]int32, n*l), make([]int32, n*l)
	for r := range n {
		row := d.ids[(from+r)*d.length : (from+r+1)*d.length]
		copy(inputs[r*l:(r+1)*l], row[:l])
		copy(labels[r*l:(r+1)*l], row[1:])
	}
	return []*tensors.Tensor{tensors.FromFlatDataAndDimensions(inputs, n, l), tensors.FromFlatDataAndDimensions(labels, n, l)}
}
