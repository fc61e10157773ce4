package platform

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"

	"github.com/gomlx/gomlx/backends"
	"github.com/gomlx/gomlx/backends/simplego"
	"github.com/onegpu/onegpu/internal/regularfile"

	_ "github.com/onegpu/onegpu/vjp" // onegpu's gradient rules, installed at import
)

// Environment variables that choose a backend, in order of precedence after an explicit spec.
const (
	// EnvBackend is GoMLX's own variable ("go", "go:ops_sequential", "xla:/abs/path/plugin.so").
	EnvBackend = "GOMLX_BACKEND"
	// EnvPlugin names a PJRT plugin file; it selects XLA when GOMLX_BACKEND is not set.
	EnvPlugin = "ONEGPU_PJRT_PLUGIN"
)

// DefaultEmbedded is the spec of the embedded backend onegpu uses by default: GoMLX's pure-Go
// backend executing one op at a time, in creation order. GoMLX v0.26.0's parallel executor deadlocks
// on transformer-sized graphs on small machines, and running ready ops eagerly keeps more
// activations alive, which defeats rematerialization and micro-batching.
const DefaultEmbedded = "go:ops_sequential"

// BackendSpec is a parsed backend choice.
type BackendSpec struct {
	// Kind is "go" (embedded, pure Go) or "xla" (a PJRT plugin).
	Kind string
	// Options are the embedded backend's options, in GoMLX's syntax (e.g. "ops_sequential",
	// "parallelism=8"). Empty for XLA.
	Options string
	// Plugin is the absolute path of the PJRT plugin for Kind "xla".
	Plugin string
	// Source says where the spec came from: "argument", "$GOMLX_BACKEND", "$ONEGPU_PJRT_PLUGIN"
	// or "default".
	Source string
}

// String returns the spec in GoMLX's GOMLX_BACKEND syntax.
func (s BackendSpec) String() string {
	switch s.Kind {
	case "xla":
		return "xla:" + s.Plugin
	default:
		if s.Options == "" {
			return "go"
		}
		return "go:" + s.Options
	}
}

// Parallel reports whether an embedded backend spec lets simplego run independent ops concurrently.
func (s BackendSpec) Parallel() bool {
	return s.Kind == "go" && !strings.Contains(s.Options, "ops_sequential")
}

// embeddedOptions are the option keys simplego v0.26.0 accepts.
var embeddedOptions = []string{"ops_sequential", "ops_parallel", "parallelism", "dotgeneral_small", "dotgeneral_large", "dotgeneral_check"}

// ResolveBackend decides which backend a spec names, without creating it.
//
// An empty spec falls back to $GOMLX_BACKEND, then $ONEGPU_PJRT_PLUGIN (XLA with that plugin), then
// the embedded backend. "go" with no options means DefaultEmbedded; "go:OPTIONS" keeps the options
// and adds ops_sequential unless they ask for parallel execution (ops_parallel or parallelism=N),
// the documented way to trade memory for speed. "xla:/abs/path/plugin.so" selects XLA with that
// plugin file. Errors name what was looked for and how to fix it.
func ResolveBackend(spec string) (BackendSpec, error) {
	source := "argument"
	if spec == "" {
		switch {
		case os.Getenv(EnvBackend) != "":
			spec, source = os.Getenv(EnvBackend), "$"+EnvBackend
		case os.Getenv(EnvPlugin) != "":
			spec, source = "xla:"+os.Getenv(EnvPlugin), "$"+EnvPlugin
		default:
			spec, source = DefaultEmbedded, "default"
		}
	}
	name, config, _ := strings.Cut(spec, ":")
	switch name {
	case "go", "simplego":
		opts, err := embeddedConfig(config)
		if err != nil {
			return BackendSpec{}, fmt.Errorf("backend %q (from %s): %w", spec, source, err)
		}
		return BackendSpec{Kind: "go", Options: opts, Source: source}, nil
	case "xla", "stablehlo", "hlo", "shlo", "pjrt":
		path, err := pluginPath(config)
		if err != nil {
			return BackendSpec{}, fmt.Errorf("backend %q (from %s): %w", spec, source, err)
		}
		return BackendSpec{Kind: "xla", Plugin: path, Source: source}, nil
	default:
		return BackendSpec{}, fmt.Errorf("unknown backend %q (from %s): use \"go\" for the embedded pure-Go backend "+
			"or \"xla:/abs/path/to/pjrt_plugin.so\" for XLA with a PJRT plugin", name, source)
	}
}

func embeddedConfig(config string) (string, error) {
	var opts []string
	parallel := false
	for _, opt := range strings.Split(config, ",") {
		if opt == "" {
			continue
		}
		key, value, hasValue := strings.Cut(opt, "=")
		known := false
		for _, k := range embeddedOptions {
			known = known || k == key
		}
		if !known {
			return "", fmt.Errorf("unknown option %q for the embedded backend; the options are %s",
				opt, strings.Join(embeddedOptions, ", "))
		}
		if key == "parallelism" {
			var n int
			if _, err := fmt.Sscanf(value, "%d", &n); !hasValue || err != nil || n < 1 {
				return "", fmt.Errorf("option %q needs a positive number of workers, e.g. parallelism=8", opt)
			}
		}
		parallel = parallel || key == "ops_parallel" || key == "parallelism"
		opts = append(opts, opt)
	}
	sequential := false
	for _, o := range opts {
		sequential = sequential || o == "ops_sequential"
	}
	if sequential && parallel {
		return "", fmt.Errorf("options %q ask for both sequential and parallel execution; keep one", config)
	}
	if !parallel && !sequential {
		opts = append([]string{"ops_sequential"}, opts...)
	}
	return strings.Join(opts, ","), nil
}

func pluginPath(config string) (string, error) {
	const fix = "name the plugin file by absolute path, e.g. xla:/abs/path/pjrt_c_api_cpu_plugin.so " +
		"(pip install lammps-jax-pjrt-cpu ships one for CPU; jax-cuda13-pjrt ships xla_cuda_plugin.so for GPUs)"
	if config == "" {
		return "", fmt.Errorf("no PJRT plugin named: %s", fix)
	}
	path := strings.Split(config, ",")[0]
	if !filepath.IsAbs(path) {
		return "", fmt.Errorf("PJRT plugin %q is not an absolute path (onegpu never downloads or searches for plugins): %s", path, fix)
	}
	info, err := os.Stat(path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return "", fmt.Errorf("PJRT plugin %q not found: %s", path, fix)
	case err != nil: // a loop of symbolic links, a path through a file, no permission
		var pathErr *fs.PathError
		if errors.As(err, &pathErr) {
			err = pathErr.Err // the message names the path already
		}
		return "", fmt.Errorf("PJRT plugin %q cannot be read (%v): %s", path, err, fix)
	}
	if !info.Mode().IsRegular() {
		return "", fmt.Errorf("PJRT plugin %q is not a regular file: %s", path, fix)
	}
	f, err := regularfile.OpenLinked(path)
	if err != nil {
		return "", fmt.Errorf("PJRT plugin %q cannot be read: %v", path, err)
	}
	defer f.Close()
	magic := make([]byte, 4)
	if _, err := io.ReadFull(f, magic); err != nil || !bytes.Equal(magic, []byte("\x7fELF")) {
		return "", fmt.Errorf("PJRT plugin %q is not a shared library (no ELF header): %s", path, fix)
	}
	return path, nil
}

// NewBackend resolves spec (see ResolveBackend) and creates the backend. It never downloads a
// plugin, and returns an error rather than panicking when the backend cannot be created. (onegpu's
// gradient rules need no backend of onegpu's: importing this package installs them.)
//
// The embedded backend is wrapped so that a dtype it cannot compute (float16) is refused while the
// graph is built, with a message that says what to use instead.
func NewBackend(spec string) (backends.Backend, error) {
	s, err := ResolveBackend(spec)
	if err != nil {
		return nil, err
	}
	return NewBackendFromSpec(s)
}

// NewBackendFromSpec creates the backend of an already resolved spec, with default XLA options
// (the user's $XLA_FLAGS, validated against the plugin's build; default client options).
func NewBackendFromSpec(s BackendSpec) (backends.Backend, error) {
	return NewBackendWithOptions(s, XLAOptions{})
}

// NewBackendWithOptions creates the backend of an already resolved spec; o configures XLA
// backends (flag presets, client options) and is ignored by the embedded one.
func NewBackendWithOptions(s BackendSpec, o XLAOptions) (backends.Backend, error) {
	switch s.Kind {
	case "go":
		var b backends.Backend
		var err error
		// simplego prints "parallelism set to N" on stdout; keep stdout clean for --json output.
		withStdoutSilenced(func() { b, err = simplego.New(s.Options) })
		if err != nil {
			return nil, fmt.Errorf("embedded backend %q: %w", s, err)
		}
		return guardDTypes(b), nil
	case "xla":
		return newXLA(s, o)
	default:
		return nil, fmt.Errorf("backend spec %+v has no kind; use ResolveBackend", s)
	}
}

var stdoutMu sync.Mutex

func withStdoutSilenced(fn func()) {
	stdoutMu.Lock()
	defer stdoutMu.Unlock()
	devNull, err := os.OpenFile(os.DevNull, os.O_WRONLY, 0)
	if err != nil {
		fn()
		return
	}
	defer devNull.Close()
	saved := os.Stdout
	os.Stdout = devNull
	defer func() { os.Stdout = saved }()
	fn()
}
