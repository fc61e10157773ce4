package main

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"syscall"
)

// Every command checks the paths it will write before it starts its work, so that a path that
// cannot take the result (a folder where a file goes, a missing or read-only folder, a loop of
// symbolic links, a FIFO) is refused at once instead of after minutes of training or measuring.

// checkOutputFile returns an error naming the flag and the path when file cannot be written: it
// is a folder, a loop of symbolic links or a file without write permission, or its folder is
// missing, not a folder or read-only. Nothing is left behind, and an existing file is not
// changed. A named pipe or a device (/dev/stdout, a shell's >(...)) is taken as it is: opening
// one to test it could block.
func checkOutputFile(flagName, file string) error {
	fail := func(format string, args ...any) error {
		return fmt.Errorf("--%s %s: %s", flagName, file, fmt.Sprintf(format, args...))
	}
	if err := checkNotDangling(file); err != nil {
		return fail("%v", err)
	}
	info, err := os.Stat(file)
	switch {
	case err == nil && info.IsDir():
		return fail("is a folder: name a file, e.g. %s", filepath.Join(file, exampleFile[flagName]))
	case err == nil && !info.Mode().IsRegular():
		return nil
	case err == nil:
		f, err := os.OpenFile(file, os.O_WRONLY, 0) // no O_TRUNC: the file stays as it is
		if err != nil {
			return fail("cannot be written: %v", describePathError(err))
		}
		return f.Close()
	case errors.Is(err, syscall.ELOOP):
		return fail("runs into a loop of symbolic links: remove the loop or name another file")
	case !errors.Is(err, fs.ErrNotExist) && !errors.Is(err, syscall.ENOTDIR):
		return fail("cannot be written: %v", describePathError(err))
	}
	if err := checkFolderWritable(filepath.Dir(file)); err != nil {
		return fail("%v", err)
	}
	return nil
}

// checkNotRead returns an error naming both flags when file, an output, is an existing file the
// run reads, so that writing it never replaces an input (a --plot naming --init-hf's config.json
// replaced it with an image): a file given to a flag of reads (flag name to path, "" for none), or
// a file in a folder given to one, unless it already holds a PNG image (an earlier plot, which
// no run reads). A file that does not exist yet replaces nothing.
func checkNotRead(flagName, file string, reads map[string]string) error {
	out, err := os.Stat(file)
	if err != nil || !out.Mode().IsRegular() {
		return nil
	}
	resolved, err := filepath.EvalSymlinks(file)
	if err != nil {
		return nil
	}
	for _, flag := range slices.Sorted(maps.Keys(reads)) {
		path := reads[flag]
		in, err := os.Stat(path)
		switch {
		case path == "" || err != nil:
		case !in.IsDir() && os.SameFile(in, out):
			return fmt.Errorf("--%s %s is --%s %s, which the run reads: name another file, e.g. %s", flagName, file, flag, path, exampleFile[flagName])
		case in.IsDir() && sameFolder(filepath.Dir(resolved), path) && !holdsPNG(resolved):
			return fmt.Errorf("--%s %s is a file of --%s %s, which the run reads: name another file, e.g. %s", flagName, file, flag, path, exampleFile[flagName])
		}
	}
	return nil
}

// holdsPNG reports whether the file starts with PNG's signature.
func holdsPNG(path string) bool {
	f, err := os.Open(path)
	if err != nil {
		return false
	}
	defer f.Close()
	head := make([]byte, 8)
	_, err = io.ReadFull(f, head)
	return err == nil && bytes.Equal(head, []byte("\x89PNG\r\n\x1a\n"))
}

// checkOutputFolder returns an error naming the flag and the path when dir cannot hold the files
// a command writes: it is a file or a loop of symbolic links, or it cannot be created (the
// nearest folder above it that exists is read-only, or is not a folder), or it exists and is
// read-only.
func checkOutputFolder(flagName, dir string) error {
	fail := func(err error) error { return fmt.Errorf("--%s %s: %v", flagName, dir, err) }
	existing := filepath.Clean(dir)
	for {
		if err := checkNotDangling(existing); err != nil {
			return fail(err)
		}
		_, err := os.Stat(existing)
		if err == nil || !errors.Is(err, fs.ErrNotExist) {
			break
		}
		parent := filepath.Dir(existing)
		if parent == existing {
			break
		}
		existing = parent
	}
	if err := checkFolderWritable(existing); err != nil {
		return fail(err)
	}
	return nil
}

// checkNotDangling returns an error when path is a symbolic link to nothing: writing through it
// would create a file elsewhere, or fail after the work ("file exists" for a folder to create).
func checkNotDangling(path string) error {
	info, err := os.Lstat(path)
	if err != nil || info.Mode()&fs.ModeSymlink == 0 {
		return nil
	}
	if _, err := os.Stat(path); errors.Is(err, fs.ErrNotExist) {
		target, _ := os.Readlink(path)
		return fmt.Errorf("%s is a symbolic link to %s, which does not exist: create it, or name another path", path, target)
	}
	return nil
}

// checkFolderWritable returns an error when dir is not a folder in which a file can be created.
// It creates and removes a probe file.
func checkFolderWritable(dir string) error {
	info, err := os.Stat(dir)
	switch {
	case errors.Is(err, syscall.ELOOP):
		return fmt.Errorf("the folder %s runs into a loop of symbolic links", dir)
	case errors.Is(err, syscall.ENOTDIR):
		return fmt.Errorf("the folder %s goes through a file, not a folder", dir)
	case errors.Is(err, fs.ErrNotExist):
		return fmt.Errorf("the folder %s does not exist", dir)
	case err != nil:
		return fmt.Errorf("the folder %s cannot be read: %v", dir, describePathError(err))
	case !info.IsDir():
		return fmt.Errorf("%s is not a folder", dir)
	}
	probe, err := os.CreateTemp(dir, ".onegpu-write-check-*")
	if err != nil {
		return fmt.Errorf("the folder %s is not writable: %v", dir, describePathError(err))
	}
	probe.Close()
	return os.Remove(probe.Name())
}

// describePathError returns the system's reason of a path error without repeating the path,
// which the caller's message already names.
func describePathError(err error) error {
	var pathErr *fs.PathError
	if errors.As(err, &pathErr) {
		return pathErr.Err
	}
	return err
}

// exampleFile names a file of the kind each output flag writes, for the message that suggests one.
var exampleFile = map[string]string{"plot": "plot.png", "json-file": "result.json"}
