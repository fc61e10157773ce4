package checkpoint

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/gomlx/gomlx/pkg/core/shapes"
	"github.com/gomlx/gomlx/pkg/ml/context"
	"github.com/gomlx/gomlx/pkg/ml/context/checkpoints"
)

// Folder is a checkpoint folder held by one run: crash-safe saves, a check of what is there
// before anything is loaded, and pruning that never loses the last whole checkpoint.
//
// GoMLX's checkpoints.Handler writes the bytes (its format, so GoMLX's tools read the folder), but
// it writes in place, never syncs and loads whatever is newest. So onegpu has the handler write into
// a staging folder inside the checkpoint folder, syncs the files, records their SHA-256 and the
// config that wrote them in a manifest (<name>.onegpu), and renames manifest, data (.bin) and
// finally metadata (.json) into place: a checkpoint exists once its .json does, whole, or not at
// all. On open, checkpoints are checked newest first (manifest, checksums, sizes, finite values);
// a damaged one is reported and skipped.
//
// The folder is locked for as long as the Folder is open (an flock on <dir>/onegpu.lock, which
// the kernel drops when the process dies, so a crashed run never blocks the next).
type Folder struct {
	dir     string
	keep    int
	lock    *folderLock
	record  WrittenBy
	staging string
	saver   *checkpoints.Handler

	// Skipped describes each damaged or partial checkpoint newer than the one resumed from.
	Skipped []string
	// ResumeFrom is the base name of the newest whole checkpoint ("" for an empty folder), and
	// ResumeStep its global step.
	ResumeFrom string
	ResumeStep int

	whole []string // base names of whole checkpoints, oldest first
	next  int      // counter of the next checkpoint's name, past every name in the folder

	pending     string // staged checkpoint's path without suffix, "" when none
	pendingStep int
}

const (
	manifestSuffix = ".onegpu"
	stagingName    = ".onegpu-staging"
	manifestFormat = 1
)

// checkpointName matches the names GoMLX gives checkpoints: checkpoint-n<counter>-<time>-step-<step>.
var checkpointName = regexp.MustCompile(`^checkpoint-n(\d+)-`)

// Open locks dir (creating it if needed) for a run that record describes, finds the newest whole
// checkpoint and compares what it records with record (WrittenBy.Differences). It returns an
// error, having changed nothing in the folder, when the folder is locked by another process, not
// writable, holds a run of another config, holds checkpoints none of which is whole, or holds
// non-finite values. keep (at least 1) is the number of whole checkpoints Save keeps.
func Open(dir string, record WrittenBy, keep int) (*Folder, error) {
	if keep < 1 {
		return nil, fmt.Errorf("keep %d checkpoints: keep at least 1", keep)
	}
	if err := os.MkdirAll(dir, 0o777); err != nil {
		return nil, fmt.Errorf("checkpoint folder: %w", err)
	}
	lock, err := lockFolder(dir)
	if err != nil {
		return nil, err
	}
	c := &Folder{dir: dir, keep: keep, lock: lock, record: record, staging: filepath.Join(dir, stagingName)}
	if err := c.scan(); err != nil {
		lock.release()
		return nil, err
	}
	return c, nil
}

// Dir is the checkpoint folder.
func (c *Folder) Dir() string { return c.dir }

// Close releases the folder's lock.
func (c *Folder) Close() {
	if c.lock != nil {
		c.lock.release()
		c.lock = nil
	}
}

// bases returns the checkpoint base names in dir that have a .json (committed), in save order.
func (c *Folder) bases() ([]string, error) {
	entries, err := os.ReadDir(c.dir)
	if err != nil {
		return nil, fmt.Errorf("checkpoint folder: %w", err)
	}
	var names []string
	for _, e := range entries {
		name := e.Name()
		if !e.IsDir() && checkpointName.MatchString(name) {
			c.next = max(c.next, counter(name)+1)
			if base, ok := strings.CutSuffix(name, checkpoints.JsonNameSuffix); ok {
				names = append(names, base)
			}
		}
	}
	sort.Slice(names, func(i, j int) bool {
		if ci, cj := counter(names[i]), counter(names[j]); ci != cj {
			return ci < cj
		}
		return names[i] < names[j]
	})
	return names, nil
}

func counter(name string) int {
	m := checkpointName.FindStringSubmatch(name)
	if m == nil {
		return -1
	}
	n, _ := strconv.Atoi(m[1])
	return n
}

// scan finds the newest whole checkpoint and checks its config and values.
func (c *Folder) scan() error {
	names, err := c.bases()
	if err != nil {
		return err
	}
	for i := len(names) - 1; i >= 0; i-- {
		m, err := c.verify(names[i])
		if err != nil {
			var nonFinite *NonFiniteError
			if errors.As(err, &nonFinite) {
				return fmt.Errorf("checkpoint %s in %s: %w; move it out of the folder to resume from an earlier one", names[i], c.dir, err)
			}
			c.Skipped = append(c.Skipped, fmt.Sprintf("%s: %v", names[i], err))
			continue
		}
		if diffs := m.WrittenBy.Differences(c.record); len(diffs) > 0 {
			return &ConfigMismatchError{Dir: c.dir, Differences: diffs}
		}
		c.ResumeFrom, c.ResumeStep = names[i], m.Step
		c.whole = []string{names[i]}
		for _, older := range names[:i] {
			if _, err := c.verify(older); err == nil {
				c.whole = append(c.whole, older)
			}
		}
		sort.Slice(c.whole, func(a, b int) bool { return counter(c.whole[a]) < counter(c.whole[b]) })
		break
	}
	if len(names) > 0 && c.ResumeFrom == "" {
		return fmt.Errorf("checkpoint folder %s holds %d checkpoints and none is whole (nothing was loaded or deleted):\n  %s\n"+
			"move them away or use another --checkpoint folder", c.dir, len(names), strings.Join(c.Skipped, "\n  "))
	}
	return nil
}

// metadata is what onegpu reads of GoMLX's .json of a checkpoint.
type metadata struct {
	Variables []struct {
		ParameterName string
		Dimensions    []int
		DType         dtypes.DType
		Pos, Length   int
	}
	BinFormat string
}

// Variables returns the variables of the checkpoint Restore loads (ResumeFrom) by name (scope and
// name, as context.Variable.ScopeAndName writes them: "/block_0/mlp/input_layer/weights"), with
// their shapes; none for an empty folder. A trainer compares them with its model's before
// restoring, so that a model of other sizes is refused by name instead of starting silently.
func (c *Folder) Variables() (map[string]shapes.Shape, error) {
	out := map[string]shapes.Shape{}
	if c.ResumeFrom == "" {
		return out, nil
	}
	_, jsonBytes, _, err := c.read(c.ResumeFrom)
	if err != nil {
		return nil, fmt.Errorf("checkpoint %s changed since it was checked: %w", c.ResumeFrom, err)
	}
	var meta metadata
	if err := json.Unmarshal(jsonBytes, &meta); err != nil {
		return nil, fmt.Errorf("checkpoint %s: metadata: %w", c.ResumeFrom, err)
	}
	for _, v := range meta.Variables {
		scope, name := context.VariableScopeAndNameFromParameterName(v.ParameterName)
		out[context.JoinScope(scope, name)] = shapes.Make(v.DType, v.Dimensions...)
	}
	return out, nil
}

// verify checks one checkpoint: manifest, checksums, sizes and finite values.
func (c *Folder) verify(base string) (*manifest, error) {
	m, jsonBytes, bin, err := c.read(base)
	if err != nil {
		return nil, err
	}
	var meta metadata
	if err := json.Unmarshal(jsonBytes, &meta); err != nil {
		return nil, fmt.Errorf("metadata: %w", err)
	}
	if meta.BinFormat != checkpoints.BinUncompressed.String() {
		return nil, fmt.Errorf("data format %q, want %q", meta.BinFormat, checkpoints.BinUncompressed)
	}
	pos := 0
	for _, v := range meta.Variables {
		size := v.DType.SizeForDimensions(v.Dimensions...)
		if v.Pos != pos || v.Length != size || pos+size > len(bin) {
			return nil, fmt.Errorf("variable %s: %d bytes at %d do not fit the %d-byte data", v.ParameterName, v.Length, v.Pos, len(bin))
		}
		if i := firstNonFinite(v.DType, bin[pos:pos+size]); i >= 0 {
			return nil, &NonFiniteError{Step: m.Step, Variable: v.ParameterName, Index: i}
		}
		pos += size
	}
	if pos != len(bin) {
		return nil, fmt.Errorf("data holds %d bytes, the variables %d", len(bin), pos)
	}
	return m, nil
}

// read reads a checkpoint's three files and checks them against the manifest's checksums.
func (c *Folder) read(base string) (m *manifest, jsonBytes, bin []byte, err error) {
	path := filepath.Join(c.dir, base)
	raw, err := os.ReadFile(path + manifestSuffix)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("no manifest (not written whole by onegpu): %w", err)
	}
	if err := json.Unmarshal(raw, &m); err != nil || m == nil || m.Format != manifestFormat {
		return nil, nil, nil, fmt.Errorf("manifest %s%s is damaged", base, manifestSuffix)
	}
	if jsonBytes, err = os.ReadFile(path + checkpoints.JsonNameSuffix); err != nil {
		return nil, nil, nil, err
	}
	if bin, err = os.ReadFile(path + checkpoints.BinDataSuffix); err != nil {
		return nil, nil, nil, err
	}
	if sum(jsonBytes) != m.JSONSHA {
		return nil, nil, nil, fmt.Errorf("metadata (%d bytes) does not match its checksum: damaged or partial", len(jsonBytes))
	}
	if int64(len(bin)) != m.BinBytes || sum(bin) != m.BinSHA {
		return nil, nil, nil, fmt.Errorf("data (%d bytes, %d written) does not match its checksum: damaged or partial", len(bin), m.BinBytes)
	}
	return m, jsonBytes, bin, nil
}

func sum(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

// Restore loads the newest whole checkpoint into ctx (through GoMLX's handler, variables are set
// as the step's graph asks for them) and returns its step; 0 and no change for an empty folder.
func (c *Folder) Restore(ctx *context.Context) (int, error) {
	if c.ResumeFrom == "" {
		return 0, nil
	}
	_, jsonBytes, bin, err := c.read(c.ResumeFrom)
	if err != nil {
		return 0, fmt.Errorf("checkpoint %s changed since it was checked: %w", c.ResumeFrom, err)
	}
	if _, err := checkpoints.Build(ctx).FromEmbed(string(jsonBytes), bin).Done(); err != nil {
		return 0, fmt.Errorf("loading checkpoint %s: %w", c.ResumeFrom, err)
	}
	return c.ResumeStep, nil
}

// Save writes ctx's variables as the checkpoint of step, crash-safely: Stage then Commit.
func (c *Folder) Save(ctx *context.Context, step int) error {
	if err := c.Stage(ctx, step); err != nil {
		return err
	}
	return c.Commit()
}

// Stage writes ctx's variables as the checkpoint of step into the staging folder and syncs them;
// it is not a checkpoint until Commit. It refuses, writing nothing, when a value is not finite (a
// *NonFiniteError). Staging a step before the next one runs and committing it only once the next
// step's loss is finite keeps weights that are finite but already diverging (the loss turns NaN
// one step later) out of the folder.
func (c *Folder) Stage(ctx *context.Context, step int) error {
	if err := checkFinite(ctx, step); err != nil {
		return err
	}
	if err := c.Discard(); err != nil {
		return err
	}
	if c.saver == nil {
		// The staging folder is this run's alone (the folder is locked): clear what a crash left.
		if err := os.RemoveAll(c.staging); err != nil {
			return fmt.Errorf("clearing %s: %w", c.staging, err)
		}
		saver, err := checkpoints.Build(ctx).Dir(c.staging).Keep(-1).WithCompression(checkpoints.BinUncompressed).Done()
		if err != nil {
			return fmt.Errorf("checkpoint folder %s: %w", c.dir, err)
		}
		c.saver = saver
	}
	if err := c.saver.Save(); err != nil {
		return fmt.Errorf("saving checkpoint of step %d: %w", step, err)
	}
	staged, err := c.saver.ListCheckpoints()
	if err != nil || len(staged) != 1 {
		return fmt.Errorf("saving checkpoint of step %d: the staging folder %s holds %d checkpoints, want 1 (%v)", step, c.staging, len(staged), err)
	}
	from := filepath.Join(c.staging, staged[0])
	jsonBytes, err := syncAndRead(from + checkpoints.JsonNameSuffix)
	if err != nil {
		return err
	}
	bin, err := syncAndRead(from + checkpoints.BinDataSuffix)
	if err != nil {
		return err
	}
	m := manifest{Format: manifestFormat, Step: step, Saved: time.Now().UTC(), WrittenBy: c.record,
		JSONSHA: sum(jsonBytes), BinSHA: sum(bin), BinBytes: int64(len(bin))}
	raw, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return err
	}
	if err := writeSynced(from+manifestSuffix, raw); err != nil {
		return err
	}
	c.pending, c.pendingStep = from, step
	return nil
}

// Pending returns the step of the staged checkpoint waiting for Commit, or -1.
func (c *Folder) Pending() int {
	if c.pending == "" {
		return -1
	}
	return c.pendingStep
}

// Discard deletes the staged checkpoint, if any.
func (c *Folder) Discard() error {
	if c.pending == "" {
		return nil
	}
	for _, suffix := range []string{checkpoints.JsonNameSuffix, checkpoints.BinDataSuffix, manifestSuffix} {
		if err := os.Remove(c.pending + suffix); err != nil && !os.IsNotExist(err) {
			return err
		}
	}
	c.pending = ""
	return nil
}

// Commit renames the staged checkpoint into the folder — manifest, data, then the .json that
// makes it a checkpoint, syncing the folder in between — and prunes old ones. Without a staged
// checkpoint it does nothing.
func (c *Folder) Commit() error {
	if c.pending == "" {
		return nil
	}
	base := fmt.Sprintf("checkpoint-n%07d-%s-step-%08d", c.next, time.Now().Format("20060102-150405"), c.pendingStep)
	to := filepath.Join(c.dir, base)
	for _, suffix := range []string{manifestSuffix, checkpoints.BinDataSuffix, checkpoints.JsonNameSuffix} {
		if suffix == checkpoints.JsonNameSuffix {
			// The manifest and the data must be durable in the folder before the .json commits them.
			if err := syncDir(c.dir); err != nil {
				return err
			}
		}
		if err := os.Rename(c.pending+suffix, to+suffix); err != nil {
			return fmt.Errorf("saving checkpoint of step %d: %w", c.pendingStep, err)
		}
	}
	if err := syncDir(c.dir); err != nil {
		return err
	}
	c.pending = ""
	c.next++
	c.whole = append(c.whole, base)
	return c.prune()
}

// prune deletes whole checkpoints beyond the newest keep and any checkpoint file older than the
// oldest one kept. The newest whole checkpoint is always kept.
func (c *Folder) prune() error {
	if len(c.whole) <= c.keep {
		return nil
	}
	c.whole = c.whole[len(c.whole)-c.keep:]
	oldest := counter(c.whole[0])
	entries, err := os.ReadDir(c.dir)
	if err != nil {
		return err
	}
	// Delete each old checkpoint's .json first, so that it stops being a checkpoint before its
	// data goes.
	sort.Slice(entries, func(i, j int) bool {
		return strings.HasSuffix(entries[i].Name(), checkpoints.JsonNameSuffix) && !strings.HasSuffix(entries[j].Name(), checkpoints.JsonNameSuffix)
	})
	for _, e := range entries {
		if name := e.Name(); !e.IsDir() && checkpointName.MatchString(name) && counter(name) < oldest {
			if err := os.Remove(filepath.Join(c.dir, name)); err != nil && !os.IsNotExist(err) {
				return fmt.Errorf("removing old checkpoint file: %w", err)
			}
		}
	}
	return nil
}

func syncAndRead(path string) ([]byte, error) {
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	if err := f.Sync(); err != nil {
		return nil, err
	}
	return io.ReadAll(f)
}

func writeSynced(path string, data []byte) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}
