// Package recipes names onegpu's models for the CLI's --model and --preset and says how each
// trains by default: a Family (its presets, its default run, how to change its dropout or
// sequence length) registered once under a name. That one registration also registers the model's
// Go type with train.RegisterModel, so that train.Load rebuilds its checkpoints: importing recipes
// is what lets a program load a checkpoint of onegpu's models by its path alone.
//
//	base, err := recipes.Defaults("gpt", "tutorial") // the tutorial's run of its GPT
//	base.Remat = train.Remat{Kinds: []string{"block"}}
//
// The built-in families are one file each: gpt.go, mlp.go, and llama.go, which registers every
// Llama-class family of package models (models.RegisterLlamaFamily: "llama", and the families a
// model file adds) with its presets. A model of your own joins the CLI's tables with one Register
// call. recipes sits above train (a Family's run is a train.Config) and below plan, whose
// estimates and searches start from its runs.
package recipes
