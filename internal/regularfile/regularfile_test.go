package regularfile_test

import (
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/onegpu/onegpu/internal/regularfile"
	"github.com/onegpu/onegpu/internal/testkit"
)

// TestOpenRefusesWhatIsNotARegularFile: a symbolic link (to a file, which keeps its bytes even
// with O_TRUNC), a folder and, on unix, a named pipe (opened without waiting for a writer) are
// *NotRegularError naming the kind; a missing file is created with O_CREATE, an existing one opened.
func TestOpenRefusesWhatIsNotARegularFile(t *testing.T) {
	dir := t.TempDir()
	victim := filepath.Join(dir, "victim")
	if err := os.WriteFile(victim, []byte("precious"), 0o666); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(dir, "link")
	if err := os.Symlink(victim, link); err != nil {
		t.Skipf("no symbolic links here: %v", err)
	}
	cases := []struct{ path, want string }{
		{link, link + " is a symbolic link to " + victim + ", not a regular file"},
		{dir, dir + " is a folder, not a regular file"},
	}
	if runtime.GOOS != "windows" {
		fifo := filepath.Join(dir, "fifo")
		if err := testkit.MakeFIFO(fifo); err != nil {
			t.Fatal(err)
		}
		cases = append(cases, struct{ path, want string }{fifo, fifo + " is a named pipe, not a regular file"})
	}
	for _, c := range cases {
		f, err := regularfile.Open(c.path, os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o666)
		var notRegular *regularfile.NotRegularError
		if !errors.As(err, &notRegular) || err.Error() != c.want {
			t.Errorf("Open(%s) = %v, %v; want %q", c.path, f, err, c.want)
		}
		if f != nil {
			f.Close()
		}
	}
	if raw, err := os.ReadFile(victim); err != nil || string(raw) != "precious" {
		t.Errorf("the link's target holds %q (%v), want it unchanged", raw, err)
	}
	created := filepath.Join(dir, "new")
	f, err := regularfile.Open(created, os.O_RDWR|os.O_CREATE, 0o666)
	if err != nil {
		t.Fatalf("creating %s: %v", created, err)
	}
	f.Close()
	if f, err = regularfile.Open(victim, os.O_RDONLY, 0); err != nil {
		t.Errorf("opening the regular file %s: %v", victim, err)
	} else {
		f.Close()
	}
}

// TestReadChecksTheSizeFirst: ReadExactly reads a file of exactly the size asked and refuses
// another size with a *SizeError naming both; ReadAtMost reads up to its limit, an empty file
// too; neither reads through a link.
func TestReadChecksTheSizeFirst(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "data")
	if err := os.WriteFile(path, []byte("0123456789"), 0o666); err != nil {
		t.Fatal(err)
	}
	if b, err := regularfile.ReadExactly(path, 10); err != nil || string(b) != "0123456789" {
		t.Errorf("ReadExactly(10) = %q, %v", b, err)
	}
	if b, err := regularfile.ReadAtMost(path, 10); err != nil || len(b) != 10 {
		t.Errorf("ReadAtMost(10) = %q, %v", b, err)
	}
	empty := filepath.Join(dir, "empty")
	if err := os.WriteFile(empty, nil, 0o666); err != nil {
		t.Fatal(err)
	}
	if b, err := regularfile.ReadAtMost(empty, 10); err != nil || len(b) != 0 {
		t.Errorf("ReadAtMost(empty file) = %q, %v; want no bytes", b, err)
	}
	var size *regularfile.SizeError
	for _, c := range []struct {
		read func() ([]byte, error)
		want string
	}{
		{func() ([]byte, error) { return regularfile.ReadExactly(path, 11) }, "holds 10 bytes, 11 expected"},
		{func() ([]byte, error) { return regularfile.ReadExactly(path, 9) }, "holds 10 bytes, 9 expected"},
		{func() ([]byte, error) { return regularfile.ReadAtMost(path, 9) }, "holds 10 bytes, more than the 9 expected"},
	} {
		if b, err := c.read(); !errors.As(err, &size) || !strings.HasSuffix(err.Error(), path+" "+c.want) {
			t.Errorf("got %q, %v; want a *SizeError saying %q", b, err, c.want)
		}
	}
	link := filepath.Join(dir, "link")
	if err := os.Symlink(path, link); err != nil {
		t.Skipf("no symbolic links here: %v", err)
	}
	var notRegular *regularfile.NotRegularError
	if b, err := regularfile.ReadAtMost(link, 100); !errors.As(err, &notRegular) {
		t.Errorf("ReadAtMost through a link = %q, %v; want a *NotRegularError", b, err)
	}
}

// TestLinkedFollowsToRegularFilesOnly: OpenLinked, CheckLinked and ReadLinked follow a symbolic
// link to a regular file (a Hugging Face cache's snapshots are links to blobs), and refuse a link
// to a folder, to a named pipe (without waiting for a writer) or to a device, naming where the
// link leads, a dangling link (fs.ErrNotExist), and a file over the limit (naming it in MiB).
func TestLinkedFollowsToRegularFilesOnly(t *testing.T) {
	dir := t.TempDir()
	blob := filepath.Join(dir, "blob")
	if err := os.WriteFile(blob, []byte(`{"a": 1}`), 0o666); err != nil {
		t.Fatal(err)
	}
	link := func(name, target string) string {
		path := filepath.Join(dir, name)
		if err := os.Symlink(target, path); err != nil {
			t.Skipf("no symbolic links here: %v", err)
		}
		return path
	}
	good := link("config.json", blob)
	if raw, err := regularfile.ReadLinked(good, 8); err != nil || string(raw) != `{"a": 1}` {
		t.Errorf("ReadLinked through a link to a file: %q, %v", raw, err)
	}
	if n, err := regularfile.CheckLinked(good, 100); n != 8 || err != nil {
		t.Errorf("CheckLinked: %d, %v", n, err)
	}
	var size *regularfile.SizeError
	if _, err := regularfile.ReadLinked(good, 7); !errors.As(err, &size) {
		t.Errorf("ReadLinked over the limit: %v", err)
	}
	sparse := filepath.Join(dir, "sparse")
	if f, err := os.Create(sparse); err != nil || f.Truncate(1<<40) != nil || f.Close() != nil {
		t.Skipf("no sparse 1 TiB file here: %v", err)
	}
	if _, err := regularfile.ReadLinked(sparse, regularfile.MaxSmallBytes); err == nil || !strings.Contains(err.Error(), "holds 1099511627776 bytes, more than the 67108864 (64 MiB) expected") {
		t.Errorf("a sparse 1 TiB file: %v", err)
	}
	var notFound *os.PathError
	if _, err := regularfile.OpenLinked(link("dangling", filepath.Join(dir, "nowhere"))); !errors.As(err, &notFound) || !os.IsNotExist(err) {
		t.Errorf("a dangling link: %v", err)
	}
	cases := map[string]string{link("to-folder", dir): "which is a folder, not a regular file", dir: dir + " is a folder, not a regular file"}
	if runtime.GOOS != "windows" {
		fifo := filepath.Join(dir, "fifo")
		if err := testkit.MakeFIFO(fifo); err != nil {
			t.Fatal(err)
		}
		cases[link("to-fifo", fifo)] = "to-fifo is a symbolic link to " + fifo + ", which is a named pipe, not a regular file"
		cases[fifo] = fifo + " is a named pipe, not a regular file"
		cases[link("to-zero", "/dev/zero")] = "to-zero is a symbolic link to /dev/zero, which is a device, not a regular file"
	}
	for path, want := range cases {
		var notRegular *regularfile.NotRegularError
		for name, err := range map[string]error{
			"OpenLinked":  func() error { f, err := regularfile.OpenLinked(path); f.Close(); return err }(),
			"CheckLinked": func() error { _, err := regularfile.CheckLinked(path, 100); return err }(),
			"ReadLinked":  func() error { _, err := regularfile.ReadLinked(path, 100); return err }(),
		} {
			if !errors.As(err, &notRegular) || !strings.Contains(err.Error(), want) {
				t.Errorf("%s(%s) = %v, want a *NotRegularError saying %q", name, path, err, want)
			}
		}
	}
}
