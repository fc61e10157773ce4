package analysis

import (
	"fmt"
)

// FormatBytes writes a byte count for people with binary units: "512 B", "1.5 KiB", "36.0 MiB",
// "1.2 GiB".
func FormatBytes(b int64) string {
	const unit = 1024
	if b < unit && b > -unit {
		return fmt.Sprintf("%d B", b)
	}
	value, exp := float64(b), 0
	for (value >= unit || value <= -unit) && exp < 4 {
		value /= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB", value, "KMGT"[exp-1])
}
