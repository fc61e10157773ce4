package data

import (
	"crypto/sha256"
	_ "embed"
	"fmt"
	"math/rand/v2"

	"github.com/gomlx/gomlx/pkg/core/tensors"

	"github.com/onegpu/onegpu/analysis"
)

// Data yields the batches of a run. Batch(step) is deterministic, so a resumed run sees exactly the
// batches an uninterrupted one would.
type Data interface {
	// Batch returns the inputs of the step-th batch, in the order the train step takes them.
	Batch(step int) []*tensors.Tensor
	// Describe says what the data is, for people.
	Describe() string
}

// SyntheticTokens is the tutorial's language-modelling data: one fixed batch of random tokens in
// [1, vocab), used at every step; the inputs are the tokens shifted right by one with 0 first, the
// labels the tokens. A model can only memorize it, which is what its falling loss shows.
type SyntheticTokens struct {
	inputs, labels       *tensors.Tensor
	batch, seqLen, vocab int
	seed                 uint64
}

// NewSyntheticTokens draws the batch [batch, seqLen] with the given seed. It returns an error
// for sizes below 1, a vocabulary below 2 (token 0 is the start token) or a batch too large to
// count.
func NewSyntheticTokens(batch, seqLen, vocab int, seed uint64) (*SyntheticTokens, error) {
	if err := checkDataSizes("synthetic tokens", size{"batch", batch}, size{"sequence length", seqLen}); err != nil {
		return nil, err
	}
	if vocab < 2 {
		return nil, fmt.Errorf("synthetic tokens: a vocabulary of %d: the tokens are in [1, vocab), so it must be at least 2", vocab)
	}
	rng := rand.New(rand.NewPCG(seed, 0x5eed))
	tokens := make([]int32, batch*seqLen)
	for i := range tokens {
		tokens[i] = int32(1 + rng.IntN(vocab-1))
	}
	inputs := make([]int32, len(tokens))
	for b := range batch {
		copy(inputs[b*seqLen+1:(b+1)*seqLen], tokens[b*seqLen:(b+1)*seqLen-1])
	}
	return &SyntheticTokens{inputs: tensors.FromFlatDataAndDimensions(inputs, batch, seqLen),
		labels: tensors.FromFlatDataAndDimensions(tokens, batch, seqLen), batch: batch, seqLen: seqLen, vocab: vocab, seed: seed}, nil
}

// size is one dimension of a batch, named for messages.
type size struct {
	name  string
	value int
}

// checkDataSizes returns an error naming the first size below 1, or saying that the sizes'
// product is more values than onegpu counts (analysis.MaxTensorElements).
func checkDataSizes(what string, sizes ...size) error {
	product := 1.0
	for _, s := range sizes {
		if s.value < 1 {
			return fmt.Errorf("%s: %s %d must be at least 1", what, s.name, s.value)
		}
		product *= float64(s.value)
	}
	if product > analysis.MaxTensorElements {
		return fmt.Errorf("%s: a batch of %.3g values is more than onegpu counts (2^46): choose smaller sizes", what, product)
	}
	return nil
}

func (d *SyntheticTokens) Batch(int) []*tensors.Tensor { return []*tensors.Tensor{d.inputs, d.labels} }

// Record is what a checkpoint records of this data (see train.DataRecord): the generator's
// parameters, which fix every token.
func (d *SyntheticTokens) Record() string {
	return fmt.Sprintf("synthetic tokens: %d×%d from a vocabulary of %d, seed %d", d.batch, d.seqLen, d.vocab, d.seed)
}

func (d *SyntheticTokens) Describe() string {
	return fmt.Sprintf("the tutorial's synthetic tokens: one fixed batch of %d×%d random tokens", d.batch, d.seqLen)
}

// Corpus is the text shipped with onegpu (testdata/genesis_exodus.txt: Genesis and Exodus, King
// James Version, public domain), 366 KB of ASCII.
//
//go:embed testdata/genesis_exodus.txt
var Corpus []byte

// Text is byte-level language modelling on a text: each batch holds windows of seqLen+1 bytes at
// positions drawn from the step's seed; inputs are a window's first seqLen bytes, labels its last
// seqLen. The first tenth of the text is held out for evaluation (EvalBatch).
type Text struct {
	text          []byte
	batch, seqLen int
	seed          uint64
}

// NewText prepares byte-level batches of the text (vocabulary 256).
func NewText(text []byte, batch, seqLen int, seed uint64) (*Text, error) {
	if err := checkDataSizes("text", size{"batch", batch}, size{"sequence length", seqLen}); err != nil {
		return nil, err
	}
	if len(text)/10 < seqLen+2 { // windows of seqLen+1 bytes at one of at least 1 position, in either part
		return nil, fmt.Errorf("a text of %d bytes is too short for sequences of %d bytes", len(text), seqLen)
	}
	return &Text{text: text, batch: batch, seqLen: seqLen, seed: seed}, nil
}

func (d *Text) Batch(step int) []*tensors.Tensor {
	return d.windows(d.text[len(d.text)/10:], uint64(step))
}

// EvalBatch returns a batch from the held-out first tenth of the text.
func (d *Text) EvalBatch() []*tensors.Tensor {
	return d.windows(d.text[:len(d.text)/10], 1<<62)
}

func (d *Text) windows(text []byte, stream uint64) []*tensors.Tensor {
	rng := rand.New(rand.NewPCG(d.seed, stream))
	inputs := make([]int32, d.batch*d.seqLen)
	labels := make([]int32, d.batch*d.seqLen)
	for b := range d.batch {
		start := rng.IntN(len(text) - d.seqLen - 1)
		for i := range d.seqLen {
			inputs[b*d.seqLen+i] = int32(text[start+i])
			labels[b*d.seqLen+i] = int32(text[start+i+1])
		}
	}
	return []*tensors.Tensor{tensors.FromFlatDataAndDimensions(inputs, d.batch, d.seqLen),
		tensors.FromFlatDataAndDimensions(labels, d.batch, d.seqLen)}
}

// Record is what a checkpoint records of this data (see train.DataRecord): the text's size and
// SHA-256, and the seed that draws the windows.
func (d *Text) Record() string {
	return fmt.Sprintf("byte-level text of %d bytes, sha256 %x, windows drawn with seed %d", len(d.text), sha256.Sum256(d.text), d.seed)
}

func (d *Text) Describe() string {
	return fmt.Sprintf("byte-level text: %d×%d byte windows of a %d KB corpus", d.batch, d.seqLen, len(d.text)/1000)
}

// ClassifierBatch is the tutorial's classification data for the MLP: one fixed batch of inputs
// drawn from N(0, 1) and random labels in [0, classes), used at every step.
type ClassifierBatch struct {
	inputs, labels *tensors.Tensor
	classes        int
	seed           uint64
}

// NewClassifierBatch draws the batch with the given seed. It returns an error for sizes or a
// number of classes below 1, or a batch too large to count.
func NewClassifierBatch(batch, inputs, classes int, seed uint64) (*ClassifierBatch, error) {
	if err := checkDataSizes("classification batch", size{"batch", batch}, size{"inputs", inputs}); err != nil {
		return nil, err
	}
	if classes < 1 {
		return nil, fmt.Errorf("classification batch: %d classes: the labels are in [0, classes), so there must be at least 1", classes)
	}
	rng := rand.New(rand.NewPCG(seed, 0xc1a55))
	x := make([]float32, batch*inputs)
	for i := range x {
		x[i] = float32(rng.NormFloat64())
	}
	y := make([]int32, batch)
	for i := range y {
		y[i] = int32(rng.IntN(classes))
	}
	return &ClassifierBatch{inputs: tensors.FromFlatDataAndDimensions(x, batch, inputs), labels: tensors.FromFlatDataAndDimensions(y, batch),
		classes: classes, seed: seed}, nil
}

func (d *ClassifierBatch) Batch(int) []*tensors.Tensor { return []*tensors.Tensor{d.inputs, d.labels} }

// Record is what a checkpoint records of this data (see train.DataRecord): the generator's
// parameters, which fix every value.
func (d *ClassifierBatch) Record() string {
	return fmt.Sprintf("classification batch: %s inputs, %d classes, seed %d", d.inputs.Shape(), d.classes, d.seed)
}

func (d *ClassifierBatch) Describe() string {
	return fmt.Sprintf("the tutorial's classification batch: %s inputs, random labels", d.inputs.Shape())
}
