//go:build !(linux || darwin || freebsd || netbsd || openbsd || dragonfly)

package safetensors

import "os"

// mmapFile does not map on this platform: the file is read by offset (File.Chunks reads into a
// buffer with ReadAt).
func mmapFile(*os.File, int64) ([]byte, error) { return nil, nil }

func munmapFile([]byte) error { return nil }
