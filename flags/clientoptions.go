package flags

import (
	"fmt"
	"math"
	"strings"
)

// Allocator is the device memory allocator of a PJRT GPU client (its "allocator" option).
type Allocator string

// The allocators the PJRT GPU plugin accepts.
const (
	// AllocatorUnset leaves the choice to the plugin (BFC).
	AllocatorUnset Allocator = ""
	// AllocatorDefault is the plugin's default, the BFC allocator.
	AllocatorDefault Allocator = "default"
	// AllocatorPlatform allocates exactly what is needed when it is needed and frees it right
	// away: slow, but the memory in use is the memory the program needs.
	AllocatorPlatform Allocator = "platform"
	// AllocatorBFC is XLA's best-fit-with-coalescing allocator over one reserved region.
	AllocatorBFC Allocator = "bfc"
	// AllocatorCUDAAsync uses CUDA's stream-ordered allocator (cudaMallocAsync).
	AllocatorCUDAAsync Allocator = "cuda_async"
)

var allocators = []Allocator{AllocatorDefault, AllocatorPlatform, AllocatorBFC, AllocatorCUDAAsync}

// ParseAllocator returns the allocator called s: default, platform, bfc or cuda_async.
func ParseAllocator(s string) (Allocator, error) {
	for _, a := range allocators {
		if string(a) == s {
			return a, nil
		}
	}
	return AllocatorUnset, fmt.Errorf("unknown allocator %q: the PJRT GPU client accepts %s", s, allocatorList())
}

func allocatorList() string {
	names := make([]string, len(allocators))
	for i, a := range allocators {
		names[i] = string(a)
	}
	return strings.Join(names, ", ")
}

// Preallocation says whether a PJRT GPU client reserves its memory fraction when it starts.
type Preallocation int8

// The preallocation choices.
const (
	// PreallocateUnset leaves it to the plugin, which preallocates.
	PreallocateUnset Preallocation = iota
	// PreallocateOn reserves MemoryFraction of the device when the client starts.
	PreallocateOn
	// PreallocateOff grows the reservation as the program needs it.
	PreallocateOff
)

// ClientOptions are the options of a PJRT GPU client that decide how device memory is held.
// Unlike XLA flags they are passed when the client is created (xla.NewWithOptions, or
// pjrt.Plugin.NewClient). The zero value leaves every choice to the plugin: the BFC allocator,
// preallocating 75% of device memory.
type ClientOptions struct {
	// Allocator picks the allocator; AllocatorUnset leaves it to the plugin.
	Allocator Allocator
	// MemoryFraction is the share of device memory the client may use, in (0, 1]; 0 leaves it
	// to the plugin (0.75).
	MemoryFraction float64
	// Preallocate says whether that share is reserved up front.
	Preallocate Preallocation
}

// Validate reports the first option that the PJRT GPU client would reject or ignore.
func (o ClientOptions) Validate() error {
	if o.Allocator != AllocatorUnset {
		if _, err := ParseAllocator(string(o.Allocator)); err != nil {
			return err
		}
	}
	if math.IsNaN(o.MemoryFraction) || o.MemoryFraction < 0 || o.MemoryFraction > 1 {
		return fmt.Errorf("memory fraction %v is not a share of device memory: it must be in (0, 1], or 0 for the plugin's 0.75", o.MemoryFraction)
	}
	if o.Preallocate < PreallocateUnset || o.Preallocate > PreallocateOff {
		return fmt.Errorf("preallocation %d is none of PreallocateUnset, PreallocateOn and PreallocateOff", o.Preallocate)
	}
	if o.Allocator == AllocatorPlatform && (o.MemoryFraction != 0 || o.Preallocate != PreallocateUnset) {
		return fmt.Errorf("the platform allocator allocates on demand and ignores the memory fraction and preallocation: " +
			"choose bfc or cuda_async to set them, or leave them unset")
	}
	return nil
}

// NamedValues returns the options as the PJRT client options of build b: a map whose values
// have the types PJRT takes (string, float32, bool), assignable to go-xla's pjrt.NamedValuesMap
// without importing it here. Unset options are left out. A CPU plugin knows none of these
// options and rejects unknown ones, so for a CPU build the options must all be unset and the
// map is empty.
func (o ClientOptions) NamedValues(b Build) (map[string]any, error) {
	if _, ok := infoOf(b); !ok {
		_, err := ParseBuild(string(b))
		return nil, err
	}
	if err := o.Validate(); err != nil {
		return nil, err
	}
	m := map[string]any{}
	if o.Allocator != AllocatorUnset {
		m["allocator"] = string(o.Allocator)
	}
	if o.MemoryFraction != 0 {
		m["memory_fraction"] = float32(o.MemoryFraction)
	}
	if o.Preallocate != PreallocateUnset {
		m["preallocate"] = o.Preallocate == PreallocateOn
	}
	if b.CPU() && len(m) > 0 {
		return nil, fmt.Errorf("allocator, memory fraction and preallocation are options of PJRT GPU clients; "+
			"the CPU plugin of %s rejects them: leave ClientOptions unset on CPU", b)
	}
	return m, nil
}

// String describes the options as "allocator=bfc memory_fraction=0.9 preallocate=false",
// leaving out unset ones; "plugin defaults" when all are unset.
func (o ClientOptions) String() string {
	var parts []string
	if o.Allocator != AllocatorUnset {
		parts = append(parts, "allocator="+string(o.Allocator))
	}
	if o.MemoryFraction != 0 {
		parts = append(parts, fmt.Sprintf("memory_fraction=%g", o.MemoryFraction))
	}
	switch o.Preallocate {
	case PreallocateOn:
		parts = append(parts, "preallocate=true")
	case PreallocateOff:
		parts = append(parts, "preallocate=false")
	}
	if len(parts) == 0 {
		return "plugin defaults"
	}
	return strings.Join(parts, " ")
}
