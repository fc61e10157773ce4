// Package checkpoint keeps a run's checkpoint folder: crash-safe saves in GoMLX's format with a
// manifest (<name>.onegpu) that records checksums and what wrote them (WrittenBy), a check of
// every checkpoint before anything is loaded, pruning that never loses the last whole one, and a
// lock that keeps a second run out of the folder. The train package opens a Folder for its runs
// (train.OpenCheckpoints, RunOptions.Checkpoints); a program of your own can use one directly:
//
//	folder, err := checkpoint.Open("runs/a", checkpoint.WrittenBy{Model: "mine", Batch: 64}, 2)
//	defer folder.Close()
//	step, err := folder.Restore(ctx)   // the newest whole checkpoint, if any
//	err = folder.Save(ctx, step+1)     // staged, synced, renamed into place
package checkpoint
