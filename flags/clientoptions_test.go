package flags

import (
	"math"
	"reflect"
	"strings"
	"testing"
)

func TestClientOptions(t *testing.T) {
	tests := []struct {
		name    string
		options ClientOptions
		build   Build
		want    map[string]any
		inErr   string
	}{
		{name: "unset leaves the plugin's defaults", build: CUDA011, want: map[string]any{}},
		{name: "every option", build: CUDA011,
			options: ClientOptions{Allocator: AllocatorBFC, MemoryFraction: 0.9, Preallocate: PreallocateOff},
			want:    map[string]any{"allocator": "bfc", "memory_fraction": float32(0.9), "preallocate": false}},
		{name: "cuda_async preallocated", build: CUDA011,
			options: ClientOptions{Allocator: AllocatorCUDAAsync, MemoryFraction: 1, Preallocate: PreallocateOn},
			want:    map[string]any{"allocator": "cuda_async", "memory_fraction": float32(1), "preallocate": true}},
		{name: "platform allocator alone", build: CUDA011, options: ClientOptions{Allocator: AllocatorPlatform},
			want: map[string]any{"allocator": "platform"}},
		{name: "platform allocator ignores the fraction", build: CUDA011,
			options: ClientOptions{Allocator: AllocatorPlatform, MemoryFraction: 0.5}, inErr: "allocates on demand"},
		{name: "fraction above 1", build: CUDA011, options: ClientOptions{MemoryFraction: 1.5}, inErr: "must be in (0, 1]"},
		{name: "negative fraction", build: CUDA011, options: ClientOptions{MemoryFraction: -0.1}, inErr: "must be in (0, 1]"},
		{name: "NaN fraction", build: CUDA011, options: ClientOptions{MemoryFraction: math.NaN()}, inErr: "must be in (0, 1]"},
		{name: "unknown allocator", build: CUDA011, options: ClientOptions{Allocator: "arena"}, inErr: "default, platform, bfc, cuda_async"},
		{name: "bad preallocation", build: CUDA011, options: ClientOptions{Preallocate: 7}, inErr: "PreallocateOff"},
		{name: "CPU with no options", build: CPU083, want: map[string]any{}},
		{name: "CPU rejects GPU options", build: CPU083, options: ClientOptions{MemoryFraction: 0.5}, inErr: "leave ClientOptions unset on CPU"},
		{name: "unknown build", build: "tpu-1", inErr: "unknown XLA build"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := tt.options.NamedValues(tt.build)
			if tt.inErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.inErr) {
					t.Fatalf("NamedValues = %v, %v; want an error with %q", got, err, tt.inErr)
				}
				return
			}
			if err != nil || !reflect.DeepEqual(got, tt.want) {
				t.Errorf("NamedValues = %v, %v; want %v", got, err, tt.want)
			}
		})
	}
}

func TestParseAllocator(t *testing.T) {
	for _, a := range []Allocator{AllocatorDefault, AllocatorPlatform, AllocatorBFC, AllocatorCUDAAsync} {
		if got, err := ParseAllocator(string(a)); err != nil || got != a {
			t.Errorf("ParseAllocator(%q) = %q, %v", a, got, err)
		}
	}
	if _, err := ParseAllocator("BFC"); err == nil {
		t.Error("ParseAllocator accepted BFC; the plugin wants bfc")
	}
}

func TestClientOptionsString(t *testing.T) {
	tests := []struct {
		options ClientOptions
		want    string
	}{
		{ClientOptions{}, "plugin defaults"},
		{ClientOptions{Allocator: AllocatorBFC, MemoryFraction: 0.9, Preallocate: PreallocateOff}, "allocator=bfc memory_fraction=0.9 preallocate=false"},
		{ClientOptions{Preallocate: PreallocateOn}, "preallocate=true"},
	}
	for _, tt := range tests {
		if got := tt.options.String(); got != tt.want {
			t.Errorf("%#v.String() = %q, want %q", tt.options, got, tt.want)
		}
	}
}
