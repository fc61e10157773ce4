package platform

import (
	"fmt"
	"log"
	"path/filepath"
	"strings"

	"github.com/onegpu/onegpu/flags"
)

// XLABackendName is the name GoMLX's XLA backend reports (backends.Backend.Name), known without
// linking XLA, which needs cgo.
const XLABackendName = "xla"

// errNoXLA says what a binary built without cgo does when asked for XLA.
const errNoXLA = "this onegpu was built without cgo, and XLA's PJRT plugins load only through cgo: " +
	"rebuild with CGO_ENABLED=1 (and a C compiler), or use the embedded backend (--backend go, or unset $" +
	EnvBackend + " and $" + EnvPlugin + ")"

// XLAOptions configure how an XLA backend is created: the XLA_FLAGS presets merged under the
// user's $XLA_FLAGS, and the PJRT client options. The zero value applies the user's flags alone.
type XLAOptions struct {
	Presets []flags.Preset
	Client  flags.ClientOptions
	// Build names the flag table to validate against when the plugin's own build cannot be
	// recognized from its platform and PJRT version. Empty means refuse unrecognized plugins
	// whenever there are flags to validate.
	Build flags.Build
}

// pluginBuild recognizes a plugin's XLA build from its PJRT version, using its file name to tell
// CPU from CUDA plugins (the PJRT platform is only known once a client exists, after XLA has
// parsed its flags).
func pluginBuild(path string, major, minor int) (flags.Build, error) {
	name := strings.ToLower(filepath.Base(path))
	platforms := []string{"cpu", "cuda"}
	if strings.Contains(name, "cuda") || strings.Contains(name, "gpu") {
		platforms = []string{"cuda", "cpu"}
	}
	var firstErr error
	for _, platform := range platforms {
		b, err := flags.BuildForPlugin(platform, major, minor)
		if err == nil {
			return b, nil
		}
		if firstErr == nil {
			firstErr = err
		}
	}
	return "", fmt.Errorf("PJRT plugin %q (API %d.%d) matches no known XLA build: %w", path, major, minor, firstErr)
}

func logProblems(problems []flags.Problem) {
	for _, p := range problems {
		log.Printf("onegpu: warning: %s", p.Error())
	}
}
