package testkit

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/onegpu/onegpu/analysis"
	"github.com/onegpu/onegpu/flags"
)

// CensusPrefix starts the name of every graph whose compiled program CompiledCensus reads: XLA
// dumps only the modules whose name starts with it.
const CensusPrefix = "census_"

// censusDir is where XLA dumps this process's census modules.
var censusDir = filepath.Join(os.TempDir(), fmt.Sprintf("onegpu-census-%d", os.Getpid()))

// censusDump is the XLA_FLAGS preset that makes XLA write the optimized HLO of the census modules.
func censusDump() flags.Preset { return flags.Dump(censusDir, CensusPrefix+".*", "") }

var censusMu sync.Mutex

// CompiledCensus compiles p, a program built on XLA() from a graph named CensusPrefix+something,
// and returns the census of the optimized HLO XLA compiled it to (every computation, fused ones
// included: analysis.ParseHLOCensus) and XLA's memory statistics. The graph is compiled for good.
func CompiledCensus(t testing.TB, p *analysis.Program) (analysis.HLOCensus, analysis.CompiledMemory) {
	t.Helper()
	name := p.Graph.Name()
	if !strings.HasPrefix(name, CensusPrefix) {
		t.Fatalf("CompiledCensus: graph %q: name it %s... so that XLA dumps its program", name, CensusPrefix)
	}
	censusMu.Lock()
	defer censusMu.Unlock()
	before, _ := analysis.OptimizedHLOFiles(censusDir)
	stats, err := analysis.CompileProgram(p)
	if err != nil {
		t.Fatal(err)
	}
	after, err := analysis.OptimizedHLOFiles(censusDir)
	if err != nil || len(after) != len(before)+1 {
		t.Fatalf("CompiledCensus: XLA dumped %d optimized modules for %q under %s (%v), want 1: was another XLA backend "+
			"created before testkit.XLA (XLA reads its flags once per process)?", len(after)-len(before), name, censusDir, err)
	}
	file := after[len(after)-1]
	census, err := analysis.ReadHLOCensus(file)
	if err != nil {
		t.Fatal(err)
	}
	// The dump is read: remove the module's files (module_NNNN.NAME.*) and, once empty, the folder.
	base := filepath.Base(file)
	if i := strings.Index(base, "."+name+"."); i > 0 {
		matches, _ := filepath.Glob(filepath.Join(censusDir, base[:i+len(name)+2]+"*"))
		for _, m := range matches {
			os.Remove(m)
		}
	}
	os.Remove(censusDir) // fails, harmlessly, while other modules' files are there
	return census, stats
}
