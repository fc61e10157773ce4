package recipes_test

import (
	"slices"
	"strings"
	"testing"

	"github.com/onegpu/onegpu/data"
	"github.com/onegpu/onegpu/internal/testkit"
	"github.com/onegpu/onegpu/models"
	"github.com/onegpu/onegpu/recipes"
	"github.com/onegpu/onegpu/train"
)

// TestDefaults: the tutorial's setups, as the CLI and the notebooks use them.
func TestDefaults(t *testing.T) {
	gpt, err := recipes.Defaults("gpt", "tiny")
	if err != nil {
		t.Fatal(err)
	}
	if m, ok := gpt.Model.(models.GPT); !ok || m.Config != models.Presets["tiny"] || gpt.Batch != 16 || gpt.MicroBatches != 4 ||
		gpt.Schedule != recipes.TutorialSchedule(3e-3) || gpt.Schedule.At(10) != 3e-3 ||
		gpt.Policy.String() != "params=float32,compute=bfloat16,output=float32" || gpt.Remat.String() != "mlp,attn" || gpt.Validate() != nil {
		t.Errorf("gpt tiny defaults %+v (validate: %v)", gpt, gpt.Validate())
	}
	tutorial, err := recipes.Defaults("gpt", "tutorial")
	if err != nil || tutorial.Batch != 64 || tutorial.MicroBatches != 4 || tutorial.Schedule.At(10) != 4e-4 {
		t.Errorf("the tutorial's run: %+v, %v; want a batch of 64 in 4 micro-batches, peak 4e-4", tutorial, err)
	}
	mlp, err := recipes.Defaults("mlp", "")
	if err != nil {
		t.Fatal(err)
	}
	if mlp.Batch != 512 || mlp.MicroBatches != 1 || mlp.Schedule.At(0) != 1e-3 || mlp.Schedule.At(100) != 1e-3 || mlp.Validate() != nil {
		t.Errorf("mlp defaults %+v", mlp)
	}
	llama, err := recipes.Defaults("llama", "llama-3.2-1b")
	if err != nil || llama.Model.(train.LanguageModel) == nil || llama.Remat.String() != "block" || llama.Batch != 4 || llama.Validate() != nil {
		t.Errorf("llama-3.2-1b defaults %+v, %v: want remat block, a batch of 4", llama, err)
	}
	if _, err := recipes.Defaults("resnet", ""); err == nil || !strings.Contains(err.Error(), "the models are gpt, llama, mlp") {
		t.Errorf("unknown model: %v", err)
	}
	if _, err := recipes.Defaults("gpt", "huge"); err == nil || !strings.Contains(err.Error(), "tiny") {
		t.Errorf("unknown preset: %v", err)
	}
	if _, err := recipes.Defaults("mlp", "tiny"); err == nil || !strings.Contains(err.Error(), "no presets") {
		t.Errorf("a preset of the MLP: %v", err)
	}
}

// TestRegister: a family registered under a new name gives its runs through Defaults, with a
// language model's defaults from LanguageRun; a name taken twice panics.
func TestRegister(t *testing.T) {
	recipes.Register("gpt-test", recipes.Family{Summary: "a GPT under another name", Presets: []string{"tiny"},
		Run: func(preset string) (train.Config, error) {
			c, err := models.Preset(preset)
			return recipes.LanguageRun(models.GPT{Config: c}), err
		}})
	c, err := recipes.Defaults("gpt-test", "tiny")
	if err != nil || c.Batch != 16 || c.MicroBatches != 4 || c.Remat.String() != "mlp,attn" || c.Validate() != nil {
		t.Errorf("the registered family's run: %+v, %v", c, err)
	}
	if !slices.Contains(recipes.Names(), "gpt-test") {
		t.Errorf("ModelNames %v lacks the registered family", recipes.Names())
	}
	defer func() {
		if recover() == nil {
			t.Error("registering gpt twice did not panic")
		}
	}()
	recipes.Register("gpt", recipes.Family{Run: func(string) (train.Config, error) { return train.Config{}, nil }})
}

// TestRegisterServesLoad: the one registration of a family also lets train.Load rebuild its
// checkpoints (train itself knows no concrete model): a checkpoint of the MLP's default run loads
// as a models.Classifier with the run's sizes, and evaluates to the loss the run's next step
// reports before its update.
func TestRegisterServesLoad(t *testing.T) {
	config, err := recipes.Defaults("mlp", "")
	if err != nil {
		t.Fatal(err)
	}
	config.Batch = 32
	k := config.Model.(models.Classifier)
	k.Config.Dropout = 0
	config.Model = k
	backend := testkit.Embedded()
	batches, err := data.NewClassifierBatch(config.Batch, k.Config.Inputs, k.Config.Classes, 1)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	tr, err := train.New(backend, config)
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close()
	if _, err := tr.Run(batches, train.RunOptions{Steps: 1, CheckpointDir: dir}); err != nil {
		t.Fatal(err)
	}
	next, err := tr.Step(batches.Batch(1)) // its loss is the saved weights' loss
	if err != nil {
		t.Fatal(err)
	}
	loaded, err := train.LoadOn(backend, dir)
	if err != nil {
		t.Fatal(err)
	}
	defer loaded.Close()
	if m, ok := loaded.Model.(models.Classifier); !ok || m.Config != k.Config {
		t.Fatalf("Load rebuilt %#v, want the run's %#v", loaded.Model, k)
	}
	loss, _, err := loaded.Loss(batches.Batch(1))
	if err != nil || loss != next.Loss {
		t.Errorf("the loaded model's loss %.9g (%v), the run's next step %.9g", loss, err, next.Loss)
	}
}
