// Package quant stores frozen weights in block codes, as QLoRA does: 4-bit NormalFloat (NF4) in
// blocks of 64 values that share one scale, the scales themselves in 8 bits (double
// quantization), or a linear 8-bit code; quantized once on the host, dequantized inside the
// program that multiplies by them.
//
//	q, err := quant.Quantize(quant.QLoRA(), weights, 4096, 4096) // float32 values, row-major
//	// q.Tensors(): the stored parts (uint8 codes, scale codes, ...), 0.5159 bytes a value
//	w := quant.NewNodes(q.Layout, parts...).Dequantize(dtypes.BFloat16) // in a graph: [4096, 4096]
//
// The codes are bitsandbytes' (the library QLoRA was published with), bit for bit: its NF4
// levels and 8-bit dynamic map, the largest magnitude of each block as its scale, each value the
// nearest level of value/scale (x·(1/scale) in float32, a tie to the lower level), two 4-bit codes
// a byte with the first in the high nibble, and under double quantization the scales minus their
// mean coded with the dynamic map in blocks of 256. TestMatchesBitsandbytes holds Quantize and
// both dequantizations to bitsandbytes 0.50.2's output (reference/bitsandbytes/nf4_fixture.py).
//
// In a graph there is no 4-bit type and no bit shift in GoMLX v0.26: the high nibble is the byte
// divided by 16, the low one the remainder, and levels are gathered from a constant table.
// Nodes.Rows expands a slice of a matrix's rows, so that a matmul can dequantize its weight a
// piece at a time.
//
// A tensor whose size is not a multiple of the block is padded with zeros to whole blocks, which
// gives bitsandbytes' codes and scales for its partial last block (zeros change no maximum); the
// padding is never part of a dequantized tensor. Layout.Bytes and Config.BytesPerParameter give
// the storage for planning: QLoRA's 0.515869140625 bytes a parameter (4.127 bits), Int8's 1.0625.
package quant
