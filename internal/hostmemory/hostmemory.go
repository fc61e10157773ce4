// Package hostmemory reads how much memory this machine can give a new process without swapping
// (MemAvailable in Linux's /proc/meminfo): the bound a run's host memory, a plan's host budget or
// a file read whole into memory is checked against before the work starts.
//
//	available, err := hostmemory.Available() // an error where the system does not say
package hostmemory

import (
	"bufio"
	"fmt"
	"os"
	"strconv"
	"strings"
)

// MemInfo is where Linux reports the host's memory.
const MemInfo = "/proc/meminfo"

// Available returns MemAvailable of /proc/meminfo in bytes. It is an error where that cannot be
// read (not Linux, or a kernel before 3.14).
func Available() (int64, error) { return availableFrom(MemInfo) }

// availableFrom reads MemAvailable from a meminfo file at path.
func availableFrom(path string) (int64, error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, fmt.Errorf("the host's available memory: %w", err)
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
		return 0, fmt.Errorf("the host's available memory: reading %s: %w", path, err)
	}
	return 0, fmt.Errorf("the host's available memory: %s has no line \"MemAvailable: N kB\"", path)
}
