//go:build linux || darwin || freebsd || netbsd || openbsd || dragonfly

package safetensors

import (
	"os"
	"syscall"
)

// mmapFile maps the whole file read-only and shared: pages come from the page cache as they are
// touched and cost no Go memory.
func mmapFile(f *os.File, size int64) ([]byte, error) {
	if int64(int(size)) != size {
		return nil, nil // larger than the address space of this platform: read by offset instead
	}
	return syscall.Mmap(int(f.Fd()), 0, int(size), syscall.PROT_READ, syscall.MAP_SHARED)
}

func munmapFile(b []byte) error { return syscall.Munmap(b) }
