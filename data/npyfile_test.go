package data_test

import (
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gomlx/gomlx/pkg/core/tensors"

	"github.com/onegpu/onegpu/data"
	"github.com/onegpu/onegpu/internal/testkit"
)

// TestReadNPYFileRefuses: a token file is read as a bounded regular file: a named pipe or a link
// to /dev/zero is refused at once (before: a FIFO given to --data or --tokens hung), a sparse
// file whose header claims 4 TiB of data is refused before it is read (before: Go's "out of
// memory"), and bytes after the data the header describes are refused (before: ignored). A key
// given twice takes its last value, as numpy's np.load does (checked with numpy 2: shape (2, 1)
// for 'shape': (1, 2), 'shape': (2, 1)); before, the first one was taken.
func TestReadNPYFileRefuses(t *testing.T) {
	dir := t.TempDir()
	write := func(name string, raw []byte) string {
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, raw, 0o644); err != nil {
			t.Fatal(err)
		}
		return path
	}
	eight := []byte{7, 0, 0, 0, 8, 0, 0, 0}
	dup := write("dup.npy", npyFile("{'descr': '<i4', 'fortran_order': False, 'shape': (1, 2), 'shape': (2, 1), }", eight))
	got, err := data.ReadNPYFile(dup)
	if err != nil || !slices.Equal(got.Shape().Dimensions, []int{2, 1}) || !slices.Equal(tensors.MustCopyFlatData[int32](got), []int32{7, 8}) {
		t.Errorf("a shape given twice: %v, %v; want [2 1] as numpy reads it", got, err)
	}
	cases := map[string]string{
		write("trailing.npy", npyFile("{'descr': '<i4', 'fortran_order': False, 'shape': (2,), }", append(eight, 1, 2, 3))): "3 bytes follow the 8 of data the header's shape (2) of Int32 describes",
		write("short.npy", npyFile("{'descr': '<i4', 'fortran_order': False, 'shape': (3,), }", eight)):                     "needs 12 bytes, the file holds 8",
		dir: "is a folder, not a regular file",
	}
	header := npyFile("{'descr': '<i4', 'fortran_order': False, 'shape': (1099511627776,), }", nil)
	sparse := write("sparse.npy", header)
	if err := os.Truncate(sparse, int64(len(header))+4<<40); err == nil {
		cases[sparse] = "of Int32 is 4398046511104 bytes of data, more than the"
	}
	if runtime.GOOS != "windows" {
		fifo := filepath.Join(dir, "fifo.npy")
		if err := testkit.MakeFIFO(fifo); err != nil {
			t.Fatal(err)
		}
		cases[fifo] = "fifo.npy is a named pipe, not a regular file"
		zero := filepath.Join(dir, "zero.npy")
		if err := os.Symlink("/dev/zero", zero); err != nil {
			t.Fatal(err)
		}
		cases[zero] = "zero.npy is a symbolic link to /dev/zero, which is a device, not a regular file"
	}
	for path, want := range cases {
		done := make(chan error, 1)
		go func() { _, err := data.ReadTokens(path, 1, 1, 10, 0); done <- err }()
		select {
		case err := <-done:
			if err == nil || !strings.Contains(err.Error(), want) {
				t.Errorf("%s: %v, want an error containing %q", filepath.Base(path), err, want)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("%s: no answer in 10 s", filepath.Base(path))
		}
	}
}
