package hostmemory

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestAvailable: MemAvailable in kB is read as bytes; a file without it, with another unit, or
// missing is an error.
func TestAvailable(t *testing.T) {
	dir := t.TempDir()
	write := func(name, text string) string {
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
		return path
	}
	good := write("good", "MemTotal:       24576000 kB\nMemFree:         1000000 kB\nMemAvailable:   22000000 kB\nBuffers:  1 kB\n")
	if got, err := availableFrom(good); err != nil || got != 22000000*1024 {
		t.Errorf("got %d, %v; want %d", got, err, 22000000*1024)
	}
	for name, text := range map[string]string{
		"none":  "MemTotal:       24576000 kB\nMemFree:         1000000 kB\n",
		"units": "MemAvailable:   22000000 MB\n",
		"bad":   "MemAvailable:   lots kB\n",
	} {
		if _, err := availableFrom(write(name, text)); err == nil || !strings.Contains(err.Error(), "the host's available memory") {
			t.Errorf("%s: %v", name, err)
		}
	}
	if _, err := availableFrom(filepath.Join(dir, "missing")); err == nil || !strings.Contains(err.Error(), "no such file") {
		t.Errorf("a missing file: %v", err)
	}
	if _, err := os.Stat(MemInfo); err == nil {
		if got, err := Available(); err != nil || got <= 0 {
			t.Errorf("this machine: %d, %v", got, err)
		}
	}
}
