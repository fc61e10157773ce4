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
