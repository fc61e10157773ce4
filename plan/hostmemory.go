package plan

import (
	"fmt"

	"github.com/onegpu/onegpu/internal/hostmemory"
)

// HostAvailable returns the memory this machine can give a new process without swapping
// (MemAvailable in /proc/meminfo), in bytes: the default host budget of a streamed plan. It is an
// error where that cannot be read (not Linux, or a kernel before 3.14): give the budget instead.
func HostAvailable() (int64, error) {
	available, err := hostmemory.Available()
	if err != nil {
		return 0, fmt.Errorf("%w; give the host budget (plan --host 128GiB)", err)
	}
	return available, nil
}
