package checkpoint

import (
	"cmp"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/gomlx/gomlx/pkg/core/shapes"
	"github.com/gomlx/gomlx/pkg/ml/context"
	"github.com/gomlx/gomlx/pkg/ml/context/checkpoints"

	"github.com/onegpu/onegpu/analysis"
	"github.com/onegpu/onegpu/internal/regularfile"
)

// Folder is a checkpoint folder held by one run: crash-safe saves, a check of what is there
// before anything is loaded, and pruning that never loses the last whole checkpoint nor touches a
// file onegpu did not write.
//
// GoMLX's checkpoints.Handler writes the bytes (its format, so GoMLX's tools read the folder), but
// it writes in place, never syncs and loads whatever is newest. So onegpu has the handler write into
// a staging folder inside the checkpoint folder, syncs the files, records their sizes, SHA-256 and
// the config that wrote them in a manifest (<name>.onegpu), and renames manifest, data (.bin) and
// finally metadata (.json) into place: a checkpoint exists once its .json does, whole, or not at
// all. On open, checkpoints are checked newest first (manifest, kinds and sizes of the files,
// checksums, finite values); a damaged one is reported and skipped.
//
// The folder is the user's data. Weights that no whole onegpu checkpoint accounts for (a .bin
// without a manifest, or whose .json was removed) make Open refuse the folder unless
// Options.Overwrite, and pruning deletes only checkpoints whose manifest says onegpu wrote them.
//
// The folder is locked for as long as the Folder is open (an flock on <dir>/onegpu.lock, which
// the kernel drops when the process dies, so a crashed run never blocks the next).
type Folder struct {
	dir      string
	keep     int
	lock     *folderLock
	readOnly bool
	record   WrittenBy
	staging  string
	saver    *checkpoints.Handler

	// Skipped describes each damaged or partial checkpoint newer than the one resumed from.
	Skipped []string
	// Foreign lists the weights (.bin files) no whole onegpu checkpoint accounts for, with why,
	// that Options.Overwrite let the run write next to. They are never deleted.
	Foreign []string
	// ResumeFrom is the base name of the newest whole checkpoint ("" for an empty folder), and
	// ResumeStep its global step, as its manifest records it.
	ResumeFrom string
	ResumeStep int

	written   WrittenBy // what the newest whole checkpoint's manifest records
	whole     []string  // base names of whole checkpoints, oldest first
	next      int       // counter of the next checkpoint's name, past every name in the folder
	leftovers []string  // files of a commit a crash cut, removed once Open succeeds

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

// Options configure OpenWith.
type Options struct {
	// Keep is the number of whole checkpoints Save keeps, at least 1.
	Keep int
	// Overwrite lets a run write into a folder that holds weights no whole onegpu checkpoint
	// accounts for (someone's data, or a checkpoint whose manifest or .json was removed), and start
	// from step 0 in a folder none of whose checkpoints is whole. Those files stay: onegpu never
	// deletes a file its manifest does not say it wrote.
	Overwrite bool
}

// Open is OpenWith(dir, record, Options{Keep: keep}).
func Open(dir string, record WrittenBy, keep int) (*Folder, error) {
	return OpenWith(dir, record, Options{Keep: keep})
}

// OpenWith locks dir (creating it if needed) for a run that record describes, finds the newest
// whole checkpoint and compares what it records with record (WrittenBy.Differences). It returns
// an error, having changed nothing in the folder, when the folder is locked by another process,
// not writable, its lock file is not onegpu's (a link, a file with other names or content), it
// holds a run of another config, checkpoints none of which is whole, weights no whole checkpoint
// accounts for (both unless opts.Overwrite), or non-finite values. Once it succeeds it removes what
// a crash left of an uncommitted checkpoint.
func OpenWith(dir string, record WrittenBy, opts Options) (*Folder, error) {
	if opts.Keep < 1 {
		return nil, fmt.Errorf("keep %d checkpoints: keep at least 1", opts.Keep)
	}
	if err := os.MkdirAll(dir, 0o777); err != nil {
		return nil, fmt.Errorf("checkpoint folder: %w", err)
	}
	lock, err := lockFolder(dir)
	if err != nil {
		return nil, err
	}
	c := &Folder{dir: dir, keep: opts.Keep, lock: lock, record: record, staging: filepath.Join(dir, stagingName)}
	if err := c.scan(opts.Overwrite); err != nil {
		lock.release()
		return nil, err
	}
	for _, path := range c.leftovers {
		if err := os.Remove(path); err != nil && !os.IsNotExist(err) {
			lock.release()
			return nil, fmt.Errorf("removing what a crash left of an uncommitted checkpoint: %w", err)
		}
	}
	return c, nil
}

// OpenReadOnly opens the checkpoint folder dir to read its newest whole checkpoint (Restore,
// Variables, Written), without locking it, creating anything or comparing it with a run: a
// program that evaluates a checkpoint, possibly while a run writes the folder. It returns an
// error when dir is not a folder or holds no whole checkpoint. Stage, Save and Commit return
// errors.
func OpenReadOnly(dir string) (*Folder, error) {
	info, err := os.Stat(dir)
	if err != nil {
		return nil, fmt.Errorf("checkpoint folder: %w", err)
	}
	if !info.IsDir() {
		return nil, fmt.Errorf("checkpoint folder %s is not a folder", dir)
	}
	c := &Folder{dir: dir, readOnly: true, staging: filepath.Join(dir, stagingName)}
	if err := c.scan(true); err != nil {
		return nil, err
	}
	if c.ResumeFrom == "" {
		skipped := ""
		if len(c.Skipped) > 0 {
			skipped = ":\n  " + strings.Join(c.Skipped, "\n  ")
		}
		return nil, fmt.Errorf("checkpoint folder %s holds no whole checkpoint%s", dir, skipped)
	}
	return c, nil
}

// Dir is the checkpoint folder.
func (c *Folder) Dir() string { return c.dir }

// Written is what the manifest of the newest whole checkpoint (ResumeFrom) records of the run
// that wrote it; the zero WrittenBy for an empty folder.
func (c *Folder) Written() WrittenBy { return c.written }

// CheckData compares data, what a run trains on (a line that changes with the batches: a content
// hash of a text, a generator's parameters), with what the newest whole checkpoint records, and
// records it in the checkpoints Save writes. A difference is a *DataMismatchError unless
// allowOther; a checkpoint that records no data (written before onegpu recorded it) matches any.
func (c *Folder) CheckData(data string, allowOther bool) error {
	if c.ResumeFrom != "" && c.written.Data != "" && c.written.Data != data && !allowOther {
		return &DataMismatchError{Dir: c.dir, Checkpoint: c.ResumeFrom, Written: c.written.Data, Asked: data}
	}
	c.record.Data = data
	return nil
}

// CheckBase compares the frozen base a run trains adapters on — sha256, the SHA-256 of its weights,
// and from, where they came from, for messages — with the base the newest whole checkpoint
// records, and records it in the checkpoints Save writes. From then on a checkpoint holds no
// frozen weight (graph.IsFrozen: the base's float or quantized weights): the adapters, their
// optimizer state, the counters and the random state only; the run makes its base again when it
// resumes (from the same Hugging Face folder or seed) and calls CheckBase before Restore. A
// checkpoint of another base is a *BaseMismatchError; one that records no base (a run of the
// whole model) has already been refused by its adapters (WrittenBy.Differences).
func (c *Folder) CheckBase(sha256, from string) error {
	if sha256 == "" {
		return fmt.Errorf("checkpoint folder %s: a base without a SHA-256 (from %s)", c.dir, from)
	}
	if c.ResumeFrom != "" && c.written.BaseSHA256 != sha256 {
		return &BaseMismatchError{Dir: c.dir, Checkpoint: c.ResumeFrom, WrittenSHA256: cmp.Or(c.written.BaseSHA256, "none"),
			WrittenFrom: cmp.Or(c.written.BaseFrom, "the checkpoint records no base"), AskedSHA256: sha256, AskedFrom: from}
	}
	c.record.BaseSHA256, c.record.BaseFrom = sha256, from
	return nil
}

// saved reports whether Stage writes v of ctx: every variable, but the frozen weights of a run
// with a base (CheckBase).
func (c *Folder) saved(ctx *context.Context, v *context.Variable) bool {
	return c.record.BaseSHA256 == "" || !analysis.IsFrozen(ctx, v)
}

// Close releases the folder's lock.
func (c *Folder) Close() {
	if c.lock != nil {
		c.lock.release()
		c.lock = nil
	}
}

func counter(name string) int {
	m := checkpointName.FindStringSubmatch(name)
	if m == nil {
		return -1
	}
	n, _ := strconv.Atoi(m[1])
	return n
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
	files, err := c.read(c.ResumeFrom)
	if err != nil {
		return nil, fmt.Errorf("checkpoint %s changed since it was checked: %w", c.ResumeFrom, err)
	}
	for _, v := range files.meta.Variables {
		scope, name := context.VariableScopeAndNameFromParameterName(v.ParameterName)
		out[context.JoinScope(scope, name)] = shapes.Make(v.DType, v.Dimensions...)
	}
	return out, nil
}

// Restore loads the newest whole checkpoint into ctx (through GoMLX's handler, variables are set
// as the step's graph asks for them) and returns its step; 0 and no change for an empty folder.
func (c *Folder) Restore(ctx *context.Context) (int, error) {
	if c.ResumeFrom == "" {
		return 0, nil
	}
	files, err := c.read(c.ResumeFrom)
	if err != nil {
		return 0, fmt.Errorf("checkpoint %s changed since it was checked: %w", c.ResumeFrom, err)
	}
	if _, err := checkpoints.Build(ctx).FromEmbed(string(files.jsonBytes), files.bin).Done(); err != nil {
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

// Stage writes ctx's variables (but a base's frozen weights: CheckBase) as the checkpoint of step
// into the staging folder and syncs them;
// it is not a checkpoint until Commit. It refuses, writing nothing, when a value is not finite (a
// *NonFiniteError). Staging a step before the next one runs and committing it only once the next
// step's loss is finite keeps weights that are finite but already diverging (the loss turns NaN
// one step later) out of the folder.
func (c *Folder) Stage(ctx *context.Context, step int) error {
	if c.readOnly {
		return fmt.Errorf("checkpoint folder %s was opened read-only (OpenReadOnly): open it with Open to save", c.dir)
	}
	if err := checkFinite(ctx, step, c.saved); err != nil {
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
	for v := range ctx.IterVariables() {
		if !c.saved(ctx, v) {
			c.saver.ExcludeVarsFromSaving(v) // the base, which the run makes again on resume
		}
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
		JSONSHA: sum(jsonBytes), JSONBytes: int64(len(jsonBytes)), BinSHA: sum(bin), BinBytes: int64(len(bin))}
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

// prune deletes whole checkpoints beyond the newest keep, and the files of any checkpoint older
// than the oldest one kept that onegpu wrote (deletable: a damaged one, or what a crash left of a
// pruning). The newest whole checkpoint is always kept, and a file onegpu did not write is never
// deleted.
func (c *Folder) prune() error {
	if len(c.whole) <= c.keep {
		return nil
	}
	c.whole = c.whole[len(c.whole)-c.keep:]
	oldest := counter(c.whole[0])
	found, err := c.list()
	if err != nil {
		return err
	}
	var bases []string
	for _, e := range found {
		if counter(e.base) < oldest && c.deletable(e) {
			bases = append(bases, e.base)
		}
	}
	// Each checkpoint's data goes first and its manifest last: a pruning that a crash cuts leaves
	// a .json and a manifest (a damaged checkpoint of onegpu's, pruned next time), never weights
	// without their .json, which scan would take for someone else's.
	for _, suffix := range []string{checkpoints.BinDataSuffix, checkpoints.JsonNameSuffix, manifestSuffix} {
		for _, base := range bases {
			if err := os.Remove(filepath.Join(c.dir, base+suffix)); err != nil && !os.IsNotExist(err) {
				return fmt.Errorf("removing old checkpoint file: %w", err)
			}
		}
	}
	return nil
}

func syncAndRead(path string) ([]byte, error) {
	f, err := regularfile.Open(path, os.O_RDWR, 0)
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
	f, err := regularfile.Open(path, os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o666)
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
