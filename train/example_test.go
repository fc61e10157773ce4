package train_test

import (
	"fmt"

	"github.com/onegpu/onegpu/train"
)

// The tutorial's learning rate: linear warm-up over 10 updates, then ×0.99 per update.
func ExampleSchedule_At() {
	for _, step := range []int{0, 5, 10, 11} {
		fmt.Printf("%.6f\n", train.TutorialSchedule.At(step)*1e4)
	}
	// Output:
	// 0.000000
	// 2.000000
	// 4.000000
	// 3.960000
}
