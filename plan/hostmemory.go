package plan

import (
	"bufio"
	"fmt"
	"os"
	"strconv"
	"strings"
)

// MemInfo is where Linux reports the host's memory.
const MemInfo = "/proc/meminfo"

// HostAvailable returns the memory this machine can give a new process without swapping
// (MemAvailable in /proc/meminfo), in bytes: the default host budget of a streamed plan. It is an
// error where that cannot be read (not Linux, or a kernel before 3.14): give the budget instead.
func HostAvailable() (int64, error) { return hostAvailableFrom(MemInfo) }

// hostAvailableFrom reads MemAvailable from a meminfo file at path.
func hostAvailableFrom(path string) (int64, error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, fmt.Errorf("the host's available memory: %w; give the host budget (plan --host 128GiB)", err)
	}
	defer f.Close()
	scanner := bufio.NewScanner(f)
	for scanner.Scan() {
		rest, ok := strings.CutPrefix(scanner.Text(), "MemAvailable:")
		if !ok {
			continue
		}
		fields := strings.Fields(rest)
		if len(fields) != 2 || fields[1] != "kB" {
			break
		}
		kb, err := strconv.ParseInt(fields[0], 10, 64)
		if err != nil || kb < 0 || kb > (1<<53) {
			break
		}
		return kb << 10, nil
	}
	if err := scanner.Err(); err != nil {
		return 0, fmt.Errorf("the host's available memory: reading %s: %w; give the host budget (plan --host 128GiB)", path, err)
	}
	return 0, fmt.Errorf("the host's available memory: %s has no line \"MemAvailable: N kB\"; give the host budget (plan --host 128GiB)", path)
}
