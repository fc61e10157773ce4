// Package plan is the tutorial's experiment in one importable place, for the CLI and the notebooks
// alike: each model's default setup (Defaults, including Adam's settings), the technique grid
// (TutorialGrid, Variant.Apply), the estimate of a step without running it (EstimateStep) and the
// planner's search for the fastest configuration that fits a memory budget (Search).
//
//	base, err := recipes.Defaults("gpt", "tutorial")
//	rows, err := plan.Search(backend, base, 24<<30, plan.A5000, false)
//	if i := plan.Fastest(rows); i >= 0 {
//		fmt.Println(rows[i].Variant, rows[i].Memory(), rows[i].Seconds)
//	}
//
// It composes the packages below it: a Variant sets train.Config's policy (mixed), remat spec
// (remat) and micro-batches (accum through optim), and EstimateStep analyzes train.Trainer.Program.
package plan
