package train_test

import (
	"math"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/gomlx/gomlx/pkg/core/tensors"

	"github.com/onegpu/onegpu/data"
	"github.com/onegpu/onegpu/layers"
	"github.com/onegpu/onegpu/mixed"
	"github.com/onegpu/onegpu/models"
	"github.com/onegpu/onegpu/optim"
	"github.com/onegpu/onegpu/platform"
	_ "github.com/onegpu/onegpu/recipes" // registers onegpu's models with train.RegisterModel, for Load
	"github.com/onegpu/onegpu/train"
)

// loadConfig is a float32 tiny GPT without dropout, in one micro-batch: its train step's loss is
// the loss of the weights before the step's update, which Loaded.Loss must reproduce.
func loadConfig() train.Config {
	g := models.Presets["tiny"]
	g.Dropout = 0
	return train.Config{Model: models.GPT{Config: g}, Batch: 4, MicroBatches: 1, Policy: mixed.Float32,
		Schedule: optim.Constant(3e-3), Seed: 3}
}

// trainedFolder trains loadConfig 3 steps into a checkpoint folder and returns it with the data
// and the loss and accuracy of a 4th step of an uninterrupted run: those of the weights after 3
// updates on batch 3.
func trainedFolder(t *testing.T) (dir string, batches *data.Text, loss4, accuracy4 float64) {
	t.Helper()
	return trainedFolderOf(t, loadConfig())
}

// trainedFolderOf is trainedFolder for the language model run c.
func trainedFolderOf(t *testing.T, c train.Config) (dir string, batches *data.Text, loss4, accuracy4 float64) {
	t.Helper()
	seqLen, _ := c.Model.(train.LanguageModel).TokenShape()
	batches, err := data.NewText(data.Corpus, c.Batch, seqLen, c.Seed)
	if err != nil {
		t.Fatal(err)
	}
	straight, err := train.New(embedded(), c)
	if err != nil {
		t.Fatal(err)
	}
	defer straight.Close()
	h, err := straight.Run(batches, train.RunOptions{Steps: 4})
	if err != nil {
		t.Fatal(err)
	}
	dir = filepath.Join(t.TempDir(), "ck")
	tr, err := train.New(embedded(), c)
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close()
	if _, err := tr.Run(batches, train.RunOptions{Steps: 3, CheckpointDir: dir}); err != nil {
		t.Fatal(err)
	}
	return dir, batches, h.Steps[3].Loss, h.Steps[3].Accuracy
}

// loadEmbedded is train.Load with the default backend resolved to the embedded one.
func loadEmbedded(t *testing.T, dir string) (*train.Loaded, error) {
	t.Helper()
	t.Setenv(platform.EnvBackend, "")
	t.Setenv(platform.EnvPlugin, "")
	return train.Load(dir)
}

// TestLoadEvaluates: a checkpoint opened with its path alone gives the model, its policy and step
// from the manifest, and Loss equals the trainer's own loss of the same weights on the same batch
// (the 4th step of an uninterrupted run); a batch of twice the size gives the mean of its halves.
func TestLoadEvaluates(t *testing.T) {
	dir, batches, loss4, accuracy4 := trainedFolder(t)
	m, err := loadEmbedded(t, dir)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	if m.Step != 3 || m.Policy != mixed.Float32 || m.Model.(models.GPT).Config != gptOf(loadConfig()) {
		t.Fatalf("loaded step %d, policy %s, model %v; want step 3 and the run's policy and model", m.Step, m.Policy, m.Model)
	}
	loss, metrics, err := m.Loss(batches.Batch(3))
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("Loss of batch 3: %.9g; the trainer's step 4: %.9g", loss, loss4)
	if math.Abs(loss-loss4) > 1e-5*loss4 || metrics["accuracy"] != accuracy4 {
		t.Errorf("Loss of batch 3: %v (accuracy %v); the trainer's step 4: %v (accuracy %v)", loss, metrics["accuracy"], loss4, accuracy4)
	}
	a, b := batches.Batch(5), batches.Batch(6)
	la, _, errA := m.Loss(a)
	lb, _, errB := m.Loss(b)
	both := make([]*tensors.Tensor, 2)
	for i := range both {
		both[i] = tensors.FromValue(append(a[i].Value().([][]int32), b[i].Value().([][]int32)...))
	}
	lab, _, errAB := m.Loss(both)
	if errA != nil || errB != nil || errAB != nil || math.Abs(lab-(la+lb)/2) > 1e-5*lab {
		t.Errorf("Loss of 8 sequences %v, of their halves %v and %v (%v %v %v): want the mean of the halves", lab, la, lb, errA, errB, errAB)
	}
	// Chunked attention and loss, chosen on the loaded model, give the plain loss.
	chunked, err := loadEmbedded(t, dir)
	if err != nil {
		t.Fatal(err)
	}
	defer chunked.Close()
	if chunked.Attention != (layers.Attention{}) || chunked.CrossEntropy != (layers.CrossEntropy{}) {
		t.Errorf("the run's attention and loss: %+v, %+v; want plain, as the manifest says", chunked.Attention, chunked.CrossEntropy)
	}
	chunked.Attention, chunked.CrossEntropy = layers.Attention{Chunked: true, Block: 16}, layers.CrossEntropy{Chunk: 32}
	if lc, _, err := chunked.Loss(batches.Batch(3)); err != nil || math.Abs(lc-loss) > 1e-5*loss {
		t.Errorf("chunked attention and loss: %v (%v), plain %v", lc, err, loss)
	}
	if _, _, err := m.Loss(batches.Batch(0)[:1]); err == nil || !strings.Contains(err.Error(), "a batch of 1 tensors, the model takes 2") {
		t.Errorf("a batch without labels: %v", err)
	}
}

// TestLoadLlama: a tiny Llama's checkpoint opens with its path alone, as the GPT's does: the model
// and its sizes come back from the manifest, and Loss of batch 3 equals the trainer's own loss of
// the same weights (the 4th step of an uninterrupted run). Before models.Llama was registered,
// Load refused the folder. (infer's tests generate from such checkpoints.)
func TestLoadLlama(t *testing.T) {
	c := llamaReference(t)
	dir, batches, loss4, accuracy4 := trainedFolderOf(t, c)
	m, err := loadEmbedded(t, dir)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	if m.Step != 3 || m.Policy != mixed.Float32 || !reflect.DeepEqual(m.Model, c.Model) {
		t.Fatalf("loaded step %d, policy %s, model %#v; want step 3 and the run's policy and model %#v", m.Step, m.Policy, m.Model, c.Model)
	}
	loss, metrics, err := m.Loss(batches.Batch(3))
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("Loss of batch 3: %.9g; the trainer's step 4: %.9g", loss, loss4)
	if math.Abs(loss-loss4) > 1e-5*loss4 || metrics["accuracy"] != accuracy4 {
		t.Errorf("Loss of batch 3: %v (accuracy %v); the trainer's step 4: %v (accuracy %v)", loss, metrics["accuracy"], loss4, accuracy4)
	}
}

// ownClassifier is a model type of a test's own, to load: the classifier under another name.
type ownClassifier struct{ models.Classifier }

// TestLoadRefusesWhatItCannotRebuild: an empty folder, a model type the program has not
// registered (until it does) and a manifest whose model config was edited are errors that say
// what to do; a classifier loads and evaluates.
func TestLoadRefusesWhatItCannotRebuild(t *testing.T) {
	if _, err := loadEmbedded(t, t.TempDir()); err == nil || !strings.Contains(err.Error(), "holds no whole checkpoint") {
		t.Errorf("an empty folder: %v", err)
	}
	c := smallMLP(t)
	c.Model = ownClassifier{c.Model.(models.Classifier)}
	dir := filepath.Join(t.TempDir(), "ck")
	tr, err := train.New(embedded(), c)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tr.Run(mlpData(smallMLP(t)), train.RunOptions{Steps: 2, CheckpointDir: dir}); err != nil {
		t.Fatal(err)
	}
	tr.Close()
	_, err = loadEmbedded(t, dir)
	if err == nil || !strings.Contains(err.Error(), "its model is a github.com/onegpu/onegpu/train_test.ownClassifier, a type this program has not registered: call train.RegisterModel") {
		t.Fatalf("an unregistered model type: %v", err)
	}
	train.RegisterModel(ownClassifier{})
	m, err := loadEmbedded(t, dir)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	if loss, _, err := m.Loss(mlpData(smallMLP(t)).Batch(0)); err != nil || !(loss > 0 && loss < 10) {
		t.Errorf("the classifier's loss: %v, %v", loss, err)
	}
	editManifest(t, dir, func(mf map[string]any) {
		mf["written_by"].(map[string]any)["model_config"].(map[string]any)["Config"].(map[string]any)["Hidden"] = 64
	})
	if _, err := loadEmbedded(t, dir); err == nil || !strings.Contains(err.Error(), "the manifest's model_config was edited or damaged") {
		t.Errorf("an edited model config: %v", err)
	}
	if err := os.RemoveAll(dir); err != nil {
		t.Fatal(err)
	}
}
