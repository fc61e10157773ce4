// Command plugintable derives the XLA flag table of a PJRT plugin by asking the plugin itself,
// for a build whose XLA source onegpu does not have:
//
//	go run ./flags/internal/plugintable -plugin /abs/path/pjrt_c_api_cpu_plugin.so \
//		-out flags/tables/flags_pjrtcpu_lammps0.11.2.tsv
//
// Every candidate name (the flags of every table builds.tsv names, other than the output's
// own, and the names of extra_candidates.txt) is probed in a child process that sets
// XLA_FLAGS=--NAME= and creates a client: XLA ends the child with "Unknown flag" for a name it
// does not know. A known name takes its row (type, C++ default, DEPRECATED) from the newest table
// that has it. A known name in no table gets the type its probes show (see inferType) and an
// empty default. flags/tables/README.md describes the method; the output starts with comments
// that record the plugin, the counts and every inference.
//
// With -values flags/tables/values_cpu-0.115.tsv it then probes which values the plugin takes
// for each flag with a setter of its own (values.go): the spellings of the proto enum behind the
// flag, read from the descriptor the plugin embeds (descriptor.go), in several cases, and lists
// and edits of them. The rows it writes are what Check accepts for those flags on the build.
package main

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"

	"github.com/onegpu/onegpu/flags/internal/tablegen"

	"github.com/onegpu/onegpu/flags/internal/pjrtprobe"
)

func main() {
	pjrtprobe.RunChildIfAsked()
	var o options
	flag.StringVar(&o.plugin, "plugin", "", "path of the PJRT plugin (.so) to probe")
	flag.StringVar(&o.tables, "tables", "flags/tables", "folder holding builds.tsv and the flag tables")
	flag.StringVar(&o.extra, "extra", "", "file of extra candidate names, one per line (default TABLES/extra_candidates.txt)")
	flag.StringVar(&o.out, "out", "", "flag table to write, e.g. flags/tables/flags_pjrtcpu_lammps0.11.2.tsv")
	flag.StringVar(&o.values, "values", "", "also probe the values of the custom flags and write them here, e.g. flags/tables/values_cpu-0.115.tsv")
	flag.IntVar(&o.workers, "j", runtime.NumCPU(), "child processes at a time")
	flag.Parse()
	if o.plugin == "" || o.out == "" || flag.NArg() > 0 {
		fmt.Fprintln(os.Stderr, "usage: plugintable -plugin PATH -out FILE.tsv [-values FILE.tsv] [-tables DIR] [-extra FILE] [-j N]")
		os.Exit(2)
	}
	if o.extra == "" {
		o.extra = filepath.Join(o.tables, "extra_candidates.txt")
	}
	if err := run(o); err != nil {
		fmt.Fprintln(os.Stderr, "plugintable:", err)
		os.Exit(1)
	}
}

type options struct {
	plugin, tables, extra, out string
	values                     string // the values table to write; empty: none
	workers                    int
	child                      []string  // the child's command; nil runs this executable again
	log                        io.Writer // progress and notes; nil is standard error
}

// row is one line of a flag table: name, type, C++ default, note.
type row [4]string

// build is one line of builds.tsv.
type build struct{ key, file, platform, version string }

func run(o options) error {
	if o.log == nil {
		o.log = os.Stderr
	}
	plugin, err := filepath.Abs(o.plugin)
	if err != nil {
		return err
	}
	sum, err := fileSHA256(plugin)
	if err != nil {
		return fmt.Errorf("reading the plugin: %w", err)
	}
	if o.child == nil {
		self, err := os.Executable()
		if err != nil {
			return err
		}
		o.child = []string{self}
	}
	prober := pjrtprobe.Prober{Plugin: plugin, Command: o.child}
	ctx := context.Background()

	base, err := prober.Probe(ctx, "")
	if err != nil {
		return err
	}
	if base.Outcome != pjrtprobe.Accepted {
		return fmt.Errorf("the plugin does not create a client with an empty XLA_FLAGS: %s", base.Summary())
	}
	version := fmt.Sprintf("%d.%d", base.Major, base.Minor)

	builds, err := readBuilds(filepath.Join(o.tables, "builds.tsv"))
	if err != nil {
		return err
	}
	outFile := filepath.Base(o.out)
	newest := map[string]row{} // name -> row of the newest table defining it
	for _, b := range builds {
		if b.file == outFile {
			if b.platform != base.Platform || b.version != version {
				return fmt.Errorf("builds.tsv gives %s (build %s) platform %s and PJRT C API %s, but the plugin reports %s and %s",
					outFile, b.key, b.platform, b.version, base.Platform, version)
			}
			continue // the table being derived is no source of itself
		}
		rows, err := readTable(filepath.Join(o.tables, b.file))
		if err != nil {
			return err
		}
		for _, r := range rows {
			newest[r[0]] = r // builds.tsv is oldest first: later tables win
		}
	}
	fromTables := len(newest)
	extras, err := readNames(o.extra)
	if err != nil {
		return err
	}
	candidates := make([]string, 0, len(newest)+len(extras))
	for name := range newest {
		candidates = append(candidates, name)
	}
	var extraOnly []string
	for _, name := range extras {
		if _, ok := newest[name]; !ok && !slices.Contains(extraOnly, name) {
			extraOnly = append(extraOnly, name)
		}
	}
	candidates = append(candidates, extraOnly...)
	slices.Sort(candidates)
	fmt.Fprintf(o.log, "plugintable: %s: platform %s, PJRT C API %s; probing %d names (%d from tables, %d extra) with %d workers\n",
		plugin, base.Platform, version, len(candidates), fromTables, len(extraOnly), o.workers)

	// Known or unknown: one child per name. The empty value is no proof of a type: a bool or
	// an int refuses it ("bad value"), which still shows that XLA knows the name.
	outcomes := make([]pjrtprobe.Result, len(candidates))
	err = parallel(o.workers, len(candidates), func(i int) error {
		r, err := prober.Probe(ctx, "--"+candidates[i]+"=")
		if err == nil && r.Outcome == pjrtprobe.Failed {
			err = fmt.Errorf("--%s=: %s", candidates[i], r.Summary())
		}
		outcomes[i] = r
		return err
	})
	if err != nil {
		return err
	}

	var known []row
	var unknown, inferNames []string
	for i, name := range candidates {
		if outcomes[i].Outcome == pjrtprobe.UnknownFlag {
			unknown = append(unknown, name)
			continue
		}
		if r, ok := newest[name]; ok {
			known = append(known, r)
			continue
		}
		inferNames = append(inferNames, name)
	}
	inferred := make([]inference, len(inferNames))
	err = parallel(o.workers, len(inferNames), func(i int) error {
		var err error
		inferred[i], err = inferType(ctx, prober, inferNames[i])
		return err
	})
	if err != nil {
		return err
	}
	for _, in := range inferred {
		known = append(known, row{in.name, in.typ, "", ""})
	}
	slices.SortFunc(known, func(a, b row) int { return strings.Compare(a[0], b[0]) })

	var out strings.Builder
	fmt.Fprintf(&out, "# XLA flags of the PJRT plugin %s (platform %s, PJRT C API %s, sha256 %s),\n",
		filepath.Base(plugin), base.Platform, version, sum)
	fmt.Fprintf(&out, "# derived by asking the plugin: go run ./flags/internal/plugintable -plugin PATH -out flags/tables/%s\n", outFile)
	out.WriteString("# Do not edit: run the command again (flags/tables/README.md says how it works).\n")
	fmt.Fprintf(&out, "# Probed %d names (%d from the other tables, %d from %s): %d known, %d unknown.\n",
		len(candidates), fromTables, len(extraOnly), filepath.Base(o.extra), len(known), len(unknown))
	out.WriteString("# Known names found in a table have that newest table's row; the others have the type their probes\n")
	out.WriteString("# show and an empty default (their real default is not known):\n")
	for _, in := range inferred {
		fmt.Fprintf(&out, "#   %s: %s (%s)\n", in.name, in.typ, in.evidence)
	}
	fmt.Fprintf(&out, "# Unknown to the plugin (%d):\n", len(unknown))
	writeWrapped(&out, "#   ", unknown, 100)
	for _, r := range known {
		out.WriteString(strings.Join(r[:], "\t") + "\n")
	}
	if err := os.WriteFile(o.out, []byte(out.String()), 0o644); err != nil {
		return err
	}
	fmt.Fprintf(o.log, "plugintable: wrote %s: %d known (%d inferred), %d unknown\n", o.out, len(known), len(inferred), len(unknown))
	for _, in := range inferred {
		if in.typ == "custom" {
			fmt.Fprintf(o.log, "plugintable: %s takes none of the probe values: classify it in custom.tsv\n", in.name)
		}
	}
	if o.values == "" {
		return nil
	}
	data, err := os.ReadFile(plugin)
	if err != nil {
		return err
	}
	var header strings.Builder
	fmt.Fprintf(&header, "# Values of the custom flags of the PJRT plugin %s (platform %s, PJRT C API %s, sha256 %s),\n",
		filepath.Base(plugin), base.Platform, version, sum)
	fmt.Fprintf(&header, "# derived by asking the plugin: go run ./flags/internal/plugintable -plugin PATH -out flags/tables/%s -values flags/tables/%s\n",
		outFile, filepath.Base(o.values))
	header.WriteString("# Do not edit: run the command again (flags/tables/README.md says how it works). Columns as in values.tsv.\n")
	return writeValues(ctx, o, prober, data, header.String(), outFile, known)
}

// inference is the type probing found for a flag in no table, and the probes that showed it.
type inference struct{ name, typ, evidence string }

// probeText is a value that no bool, number or enum setter accepts and any plain string flag does.
const probeText = "onegpu-probe-text"

// inferType finds the type of a known flag from the values the plugin accepts, in this order:
// any text accepted means string; "true" and "false" accepted mean bool (a string would have
// taken the text); "1.5" accepted means float; "1" accepted means an integer, int64 when
// 4294967296 (2^32) is accepted too, else int32. A flag that takes none of these has a setter of
// its own: "custom", which must then be classified in custom.tsv.
func inferType(ctx context.Context, p pjrtprobe.Prober, name string) (inference, error) {
	in := inference{name: name}
	var trail []string
	accepts := func(value string) (bool, error) {
		r, err := p.Probe(ctx, "--"+name+"="+value)
		if err != nil {
			return false, err
		}
		switch r.Outcome {
		case pjrtprobe.Accepted:
			trail = append(trail, fmt.Sprintf("%q accepted", value))
			return true, nil
		case pjrtprobe.BadValue:
			trail = append(trail, fmt.Sprintf("%q refused", value))
			return false, nil
		}
		return false, fmt.Errorf("--%s=%s: %s, after the name proved known", name, value, r.Summary())
	}
	steps := []struct {
		values []string
		typ    string
	}{
		{[]string{probeText}, "string"},
		{[]string{"true", "false"}, "bool"},
		{[]string{"1.5"}, "float"},
		{[]string{"1"}, "int"},
	}
	in.typ = "custom"
	for _, s := range steps {
		all := true
		for _, v := range s.values {
			ok, err := accepts(v)
			if err != nil {
				return in, err
			}
			if !ok {
				all = false
				break
			}
		}
		if all {
			in.typ = s.typ
			break
		}
	}
	if in.typ == "int" {
		in.typ = "int32"
		wide, err := accepts("4294967296")
		if err != nil {
			return in, err
		}
		if wide {
			in.typ = "int64"
		}
	}
	in.evidence = strings.Join(trail, ", ")
	return in, nil
}

// parallel calls f(0..n-1) on at most workers goroutines and returns the first error.
func parallel(workers, n int, f func(i int) error) error {
	workers = max(1, min(workers, n))
	next := make(chan int)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				errs[i] = f(i)
			}
		}()
	}
	for i := range n {
		next <- i
	}
	close(next)
	wg.Wait()
	return errors.Join(errs...)
}

func readBuilds(path string) ([]build, error) {
	lines, err := tsv(path, 5)
	if err != nil {
		return nil, err
	}
	out := make([]build, len(lines))
	for i, f := range lines {
		out[i] = build{key: f[0], file: f[1], platform: f[2], version: f[3]}
	}
	return out, nil
}

func readTable(path string) ([]row, error) {
	lines, err := tsv(path, 4)
	if err != nil {
		return nil, err
	}
	out := make([]row, len(lines))
	for i, f := range lines {
		out[i] = row(f)
	}
	return out, nil
}

// tsv returns the rows of a tab-separated file (see tablegen.Rows).
func tsv(path string, n int) ([][]string, error) {
	return tablegen.Rows(os.DirFS(filepath.Dir(path)), filepath.Base(path), n)
}

// readNames returns the names of a file with one name per line, '#' comments and blank lines
// left out.
func readNames(path string) ([]string, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var names []string
	s := bufio.NewScanner(f)
	for s.Scan() {
		line, _, _ := strings.Cut(s.Text(), "#")
		if line = strings.TrimSpace(line); line != "" {
			if strings.ContainsAny(line, " \t=") || strings.HasPrefix(line, "-") {
				return nil, fmt.Errorf("%s: %q is not a flag name (write it without dashes or value)", path, line)
			}
			names = append(names, line)
		}
	}
	return names, s.Err()
}

func fileSHA256(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", err
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// writeWrapped writes names separated by spaces, in lines of at most width bytes that start
// with prefix.
func writeWrapped(b *strings.Builder, prefix string, names []string, width int) {
	line := prefix
	for _, name := range names {
		if line != prefix && len(line)+1+len(name) > width {
			b.WriteString(line + "\n")
			line = prefix
		}
		if line != prefix {
			line += " "
		}
		line += name
	}
	if line != prefix {
		b.WriteString(line + "\n")
	}
}
