package checkpoint

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/gomlx/gomlx/pkg/ml/context/checkpoints"

	"github.com/onegpu/onegpu/internal/regularfile"
)

// entry is what the folder holds of one checkpoint name: which of its three files are there
// (whatever their kind: a link or a pipe counts, and is refused when read).
type entry struct {
	base                string
	json, bin, manifest bool
}

// list returns the folder's checkpoint names in save order (their counter, then the name), and
// sets next past every counter.
func (c *Folder) list() ([]*entry, error) {
	dirEntries, err := os.ReadDir(c.dir)
	if err != nil {
		return nil, fmt.Errorf("checkpoint folder: %w", err)
	}
	byBase := map[string]*entry{}
	for _, d := range dirEntries {
		name := d.Name()
		if d.IsDir() || !checkpointName.MatchString(name) {
			continue
		}
		c.next = max(c.next, counter(name)+1)
		for _, suffix := range []string{checkpoints.JsonNameSuffix, checkpoints.BinDataSuffix, manifestSuffix} {
			base, ok := strings.CutSuffix(name, suffix)
			if !ok {
				continue
			}
			e := byBase[base]
			if e == nil {
				e = &entry{base: base}
				byBase[base] = e
			}
			switch suffix {
			case checkpoints.JsonNameSuffix:
				e.json = true
			case checkpoints.BinDataSuffix:
				e.bin = true
			default:
				e.manifest = true
			}
		}
	}
	out := make([]*entry, 0, len(byBase))
	for _, e := range byBase {
		out = append(out, e)
	}
	sort.Slice(out, func(i, j int) bool {
		if ci, cj := counter(out[i].base), counter(out[j].base); ci != cj {
			return ci < cj
		}
		return out[i].base < out[j].base
	})
	return out, nil
}

// scan finds the newest whole checkpoint, checks its config and values, and what no whole
// checkpoint accounts for: with overwrite false, weights of someone else's, or checkpoints none of
// which is whole, are errors. A read-only folder compares nothing with a run.
func (c *Folder) scan(overwrite bool) error {
	found, err := c.list()
	if err != nil {
		return err
	}
	var committed []string // names with a .json: checkpoints, if whole
	for _, e := range found {
		if e.json {
			committed = append(committed, e.base)
		}
	}
	for i := len(committed) - 1; i >= 0; i-- {
		m, err := c.verify(committed[i])
		if err != nil {
			var nonFinite *NonFiniteError
			if errors.As(err, &nonFinite) {
				return fmt.Errorf("checkpoint %s in %s: %w; move it out of the folder to resume from an earlier one", committed[i], c.dir, err)
			}
			c.Skipped = append(c.Skipped, fmt.Sprintf("%s: %v", committed[i], err))
			continue
		}
		if diffs := m.WrittenBy.Differences(c.record); len(diffs) > 0 && !c.readOnly {
			return &ConfigMismatchError{Dir: c.dir, Differences: diffs}
		}
		c.ResumeFrom, c.ResumeStep, c.written = committed[i], m.Step, m.WrittenBy
		c.whole = []string{committed[i]}
		for _, older := range committed[:i] {
			if _, err := c.verify(older); err == nil {
				c.whole = append(c.whole, older)
			}
		}
		sort.Slice(c.whole, func(a, b int) bool { return counter(c.whole[a]) < counter(c.whole[b]) })
		break
	}
	if c.readOnly {
		return nil
	}
	foreign, err := c.unaccounted(found)
	if err != nil {
		return err
	}
	if len(foreign) > 0 && !overwrite {
		return fmt.Errorf("checkpoint folder %s holds weights that no whole onegpu checkpoint accounts for; nothing was loaded or deleted:\n  %s\n"+
			"they may be someone's data: move them out of the folder or use another checkpoint folder (RunOptions.CheckpointDir); or, to train in this folder "+
			"anyway, pass RunOptions.Overwrite (checkpoint.Options.Overwrite): onegpu never deletes files it did not write",
			c.dir, strings.Join(foreign, "\n  "))
	}
	c.Foreign = foreign
	if len(committed) > 0 && c.ResumeFrom == "" && !overwrite {
		return fmt.Errorf("checkpoint folder %s holds %d checkpoints and none is whole (nothing was loaded or deleted):\n  %s\n"+
			"move them away or use another checkpoint folder (RunOptions.CheckpointDir); or pass RunOptions.Overwrite to train from step 0 next to them",
			c.dir, len(committed), strings.Join(c.Skipped, "\n  "))
	}
	return nil
}

// unaccounted returns, with why, each .bin of the folder that is not the data of a whole
// checkpoint nor of a checkpoint onegpu wrote: a .bin without a valid manifest (someone's, or
// one whose manifest was removed), or one with onegpu's manifest but no .json (removed) unless
// it is the commit a crash cut (its .json still staged: those files are noted in leftovers, for
// OpenWith to remove). Damaged checkpoints with their .json and manifest are onegpu's: scan
// reports them as skipped.
func (c *Folder) unaccounted(found []*entry) ([]string, error) {
	whole := map[string]bool{}
	for _, base := range c.whole {
		whole[base] = true
	}
	var foreign []string
	var staged map[string]string // checksum -> path of the staged .json files, read once
	for _, e := range found {
		if !e.bin || whole[e.base] {
			continue
		}
		path := filepath.Join(c.dir, e.base)
		m, err := readManifest(path + manifestSuffix)
		switch {
		case err != nil && !e.manifest:
			foreign = append(foreign, fmt.Sprintf("%s.bin: no manifest (%s): not a checkpoint onegpu wrote", e.base, e.base+manifestSuffix))
		case err != nil:
			foreign = append(foreign, fmt.Sprintf("%s.bin: %v", e.base, err))
		case e.json:
			// onegpu's, damaged: reported as skipped.
		default:
			if staged == nil {
				if staged, err = c.stagedMetadata(); err != nil {
					return nil, err
				}
			}
			if stagedJSON, ok := staged[m.JSONSHA]; ok {
				c.leftovers = append(c.leftovers, path+checkpoints.BinDataSuffix, path+manifestSuffix, stagedJSON)
				continue
			}
			foreign = append(foreign, fmt.Sprintf("%s.bin: its manifest is onegpu's but its .json is gone (removed?): "+
				"not a checkpoint onegpu committed, nor one a crash cut", e.base))
		}
	}
	return foreign, nil
}

// deletable reports whether prune may delete e's files: onegpu's manifest says it wrote them, and
// they are not weights without their .json (which unaccounted counts as someone's: onegpu's
// commits and prunings never leave those, but for a commit a crash cut, which OpenWith removes).
func (c *Folder) deletable(e *entry) bool {
	if e.bin && !e.json {
		return false
	}
	_, err := readManifest(filepath.Join(c.dir, e.base+manifestSuffix))
	return err == nil
}

// stagedMetadata returns the .json files in the staging folder by their SHA-256: a commit that a
// crash cut between the data's rename and the .json's left it there.
func (c *Folder) stagedMetadata() (map[string]string, error) {
	out := map[string]string{}
	entries, err := os.ReadDir(c.staging)
	if errors.Is(err, os.ErrNotExist) {
		return out, nil
	}
	if err != nil {
		return nil, fmt.Errorf("checkpoint folder %s: %w", c.dir, err)
	}
	for _, e := range entries {
		if !strings.HasSuffix(e.Name(), checkpoints.JsonNameSuffix) {
			continue
		}
		path := filepath.Join(c.staging, e.Name())
		if raw, err := regularfile.ReadAtMost(path, maxMetadataBytes); err == nil {
			out[sum(raw)] = path
		}
	}
	return out, nil
}
