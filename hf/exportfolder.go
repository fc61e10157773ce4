package hf

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"

	"github.com/onegpu/onegpu/internal/filelock"
	"github.com/onegpu/onegpu/internal/regularfile"
)

// MarkerFile is the file by which Export recognizes a folder it wrote: it is created before
// anything else is written (so a folder left by an export that was killed is recognized too) and,
// once the export is whole, lists the files it wrote. While an export writes, it holds the file's
// lock: a second export into the same folder is refused.
const MarkerFile = "onegpu-export.json"

// marker is MarkerFile's content.
type marker struct {
	ExportedBy string   `json:"exported_by"`
	Complete   bool     `json:"complete"`
	Files      []string `json:"files,omitempty"`
}

// ForeignFolderError is Export's (and CheckExportFolder's) error for a folder that holds files
// Export did not write: a Hugging Face model someone downloaded or saved, or anything else. Export
// replaces config.json and the weights files and removes other weights files, so it writes only
// into a new or empty folder or one it exported before, unless ExportOptions.Overwrite.
type ForeignFolderError struct {
	Dir   string
	Files []string // the folder's entries, sorted
}

func (e *ForeignFolderError) Error() string { return e.Explain("set ExportOptions.Overwrite") }

// Explain is the error's message with overwrite, what lets Export replace the files, in its fix (a
// CLI names its flag).
func (e *ForeignFolderError) Explain(overwrite string) string {
	return fmt.Sprintf("%s holds files onegpu did not export (%s): an export replaces config.json and the weights and removes other "+
		"weights files, so it writes into a new or empty folder, or one onegpu exported before (it holds %s); "+
		"export to another folder, or %s to replace them", e.Dir, list(e.Files), MarkerFile, overwrite)
}

// SourceFolderError is Export's (and ExportAdapter's) error for an export into the folder the
// model or adapter was read from (ExportOptions.From, AdapterOptions.From), however it is named (a
// symbolic link, "..").
type SourceFolderError struct{ Dir, From string }

func (e *SourceFolderError) Error() string {
	return fmt.Sprintf("%s is the folder the run read its model or adapter from (%s): the export would replace what it read; export to another folder", e.Dir, e.From)
}

// exported matches every file Export writes or removes, the marker excepted: its leftover
// temporary files (atomicfile's ".NAME.NNN.tmp") are removed by the next export.
func exported(name string) bool {
	return name == ConfigFile || weightFile.MatchString(name) || slices.Contains(carried, name)
}

// leftover matches the temporary files of an export that was killed while it wrote NAME.
var leftover = regexp.MustCompile(`^\.(.+)\.\d+\.tmp$`)

// CheckExportFolder returns the error Export would give for dir before it writes anything, so
// that a run can check its output before training: dir must be a folder or not exist (a dangling
// symbolic link is an error); it must not be the folder opts.From names (*SourceFolderError);
// it must be empty, or hold MarkerFile, or opts.Overwrite must be set (*ForeignFolderError); no
// file Export would replace may be a folder; and the files Export copies from opts.From must be
// regular files (or missing) of at most regularfile.MaxSmallBytes.
func CheckExportFolder(dir string, opts ExportOptions) error {
	if err := checkCarried(opts.From); err != nil {
		return err
	}
	return checkFolder(dir, exported, opts.Overwrite, opts.From)
}

// checkFolder is CheckExportFolder's check of dir for an export that writes the files writes
// names, and must not write into the folders sources name.
func checkFolder(dir string, writes func(name string) bool, overwrite bool, sources ...string) error {
	info, err := os.Lstat(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	if info.Mode()&fs.ModeSymlink != 0 {
		target, _ := os.Readlink(dir)
		if info, err = os.Stat(dir); errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("%s is a symbolic link to %s, which does not exist: create that folder or name another", dir, target)
		} else if err != nil {
			return err
		}
	}
	if !info.IsDir() {
		return fmt.Errorf("%s is %s, not a folder: an export writes a folder of files", dir, regularfile.Kind(info.Mode()))
	}
	for _, source := range sources {
		if from, err := os.Stat(source); source != "" && err == nil && os.SameFile(info, from) {
			return &SourceFolderError{Dir: dir, From: source}
		}
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	var names []string
	ours := false
	for _, e := range entries {
		names = append(names, e.Name())
		switch {
		case e.Name() == MarkerFile:
			if !e.Type().IsRegular() {
				return &regularfile.NotRegularError{Path: filepath.Join(dir, MarkerFile), Mode: e.Type()}
			}
			ours = true
		case e.IsDir() && writes(e.Name()):
			return fmt.Errorf("%s is a folder where the export writes a file: move it away", filepath.Join(dir, e.Name()))
		}
	}
	if len(names) > 0 && !ours && !overwrite {
		return &ForeignFolderError{Dir: dir, Files: names}
	}
	return nil
}

// checkCarried checks the files Export copies from the source folder, before any is copied.
func checkCarried(from string) error {
	if from == "" {
		return nil
	}
	for _, name := range append([]string{ConfigFile}, carried...) {
		if _, err := regularfile.CheckLinked(filepath.Join(from, name), regularfile.MaxSmallBytes); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return err
		}
	}
	return nil
}

// exportFolder is a folder Export writes into, marked and locked for the time it writes.
type exportFolder struct {
	dir    string
	marker *os.File
}

// claimFolder checks dir (check: CheckExportFolder's or CheckAdapterFolder's), creates it, writes
// an incomplete marker and takes its lock, then removes what an export that was killed left
// behind: temporary files of the names the export writes.
func claimFolder(dir string, writes func(name string) bool, check func() error) (*exportFolder, error) {
	if err := check(); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(dir, 0o777); err != nil {
		return nil, err
	}
	f, err := regularfile.Open(filepath.Join(dir, MarkerFile), os.O_RDWR|os.O_CREATE, 0o666)
	if err != nil {
		return nil, err
	}
	if err := filelock.TryLock(f); err != nil {
		f.Close()
		if errors.Is(err, filelock.ErrLocked) {
			return nil, fmt.Errorf("another export is writing to %s: wait for it, or export to another folder", dir)
		}
		return nil, err
	}
	folder := &exportFolder{dir: dir, marker: f}
	if err := folder.mark(marker{ExportedBy: "onegpu"}); err != nil {
		folder.close()
		return nil, err
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		folder.close()
		return nil, err
	}
	for _, e := range entries {
		if m := leftover.FindStringSubmatch(e.Name()); m != nil && e.Type().IsRegular() && writes(m[1]) {
			if err := os.Remove(filepath.Join(dir, e.Name())); err != nil {
				folder.close()
				return nil, err
			}
		}
	}
	return folder, nil
}

// mark writes m into the marker, in place (the file is the lock).
func (f *exportFolder) mark(m marker) error {
	raw, _ := json.MarshalIndent(m, "", "  ")
	raw = append(raw, '\n')
	if err := f.marker.Truncate(0); err != nil {
		return err
	}
	if _, err := f.marker.WriteAt(raw, 0); err != nil {
		return err
	}
	return f.marker.Sync()
}

// finish records the files written and releases the folder.
func (f *exportFolder) finish(written map[string]bool) error {
	var names []string
	for n := range written {
		names = append(names, n)
	}
	slices.Sort(names)
	err := f.mark(marker{ExportedBy: "onegpu", Complete: true, Files: names})
	return errors.Join(err, f.close())
}

func (f *exportFolder) close() error {
	filelock.Unlock(f.marker)
	return f.marker.Close()
}
