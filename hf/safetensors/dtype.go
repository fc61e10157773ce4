package safetensors

import (
	"fmt"
	"sort"
	"strings"
)

// DType is a tensor's element type as the header spells it ("F32", "BF16", ...).
type DType string

// The element types the format defines (safetensors 0.8.0). F4 and the F6 types pack several
// values per byte; the others are whole bytes per value.
const (
	BOOL   DType = "BOOL"
	F4     DType = "F4"
	F6E2M3 DType = "F6_E2M3"
	F6E3M2 DType = "F6_E3M2"
	U8     DType = "U8"
	I8     DType = "I8"
	F8E5M2 DType = "F8_E5M2"
	F8E4M3 DType = "F8_E4M3"
	F8E8M0 DType = "F8_E8M0"
	I16    DType = "I16"
	U16    DType = "U16"
	F16    DType = "F16"
	BF16   DType = "BF16"
	I32    DType = "I32"
	U32    DType = "U32"
	F32    DType = "F32"
	C64    DType = "C64"
	F64    DType = "F64"
	I64    DType = "I64"
	U64    DType = "U64"
)

// dtypeOrder lists the types in the order of the reference implementation's enum: its writer lays
// tensors out by this order, descending (widest alignment first), then by name, and so does Write,
// so that a file written here is byte for byte the one Python writes from the same tensors.
var dtypeOrder = []DType{BOOL, F4, F6E2M3, F6E3M2, U8, I8, F8E5M2, F8E4M3, F8E8M0, I16, U16, F16, BF16,
	I32, U32, F32, C64, F64, I64, U64}

var dtypeBits = map[DType]int{
	BOOL: 8, F4: 4, F6E2M3: 6, F6E3M2: 6, U8: 8, I8: 8, F8E5M2: 8, F8E4M3: 8, F8E8M0: 8,
	I16: 16, U16: 16, F16: 16, BF16: 16, I32: 32, U32: 32, F32: 32, C64: 64, F64: 64, I64: 64, U64: 64,
}

var dtypeRank = func() map[DType]int {
	rank := make(map[DType]int, len(dtypeOrder))
	for i, d := range dtypeOrder {
		rank[d] = i
	}
	return rank
}()

// Bits is the size of one value in bits (4 for F4, 16 for BF16), or 0 for a type the format does
// not define.
func (d DType) Bits() int { return dtypeBits[d] }

// Known reports whether the format defines d.
func (d DType) Known() bool { return d.Bits() > 0 }

// knownDTypes lists the defined type names, for error messages.
func knownDTypes() string {
	names := make([]string, len(dtypeOrder))
	for i, d := range dtypeOrder {
		names[i] = string(d)
	}
	sort.Strings(names)
	return strings.Join(names, ", ")
}

// byteSize is the number of bytes elements values of d take, or an error when they do not fill
// whole bytes (the format requires it) or the count overflows.
func (d DType) byteSize(elements int64) (int64, error) {
	bits := int64(d.Bits())
	if elements > (1<<62)/bits {
		return 0, fmt.Errorf("%d values of %s overflow a byte count", elements, d)
	}
	if elements*bits%8 != 0 {
		return 0, fmt.Errorf("%d values of %s do not fill whole bytes", elements, d)
	}
	return elements * bits / 8, nil
}
