package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/onegpu/onegpu/flags/internal/pjrtprobe"
)

// The value derivation: for each flag that XLA parses with a setter of its own (type custom in
// the table, kind other than bool or int32 in custom.tsv), which spellings the plugin accepts.
// It writes rows with the columns of values.tsv (build, flag, form, values, evidence); README.md
// describes the method.

// valueFlag is one custom flag whose values are probed.
type valueFlag struct {
	name, kind string   // kind as custom.tsv gives it: enum, string, list, list-edit, list-append
	protos     []string // proto names it may take: the plugin's enum, custom.tsv's values, the default's items
}

// textSamples are the values that make a flag "any": taking all of them, it takes any text.
var textSamples = []string{probeText, "", "onegpu,probe=(text):1"}

// genericValues are spellings tried on every flag besides its proto names.
var genericValues = []string{"", "on", "off", "true", "false", "default", "none", "all", "0", "1", probeText}

// candidates returns the spellings to try for a flag whose values are the proto names protos:
// each name; then each run of its '_'-separated words (longest first), lower case then upper
// case, leaving out runs made only of words every name has (DETECTION_MODE); then
// genericValues. There are no duplicates.
func candidates(protos []string) []string {
	var out []string
	seen := map[string]bool{}
	add := func(s string) {
		if !seen[s] {
			seen[s] = true
			out = append(out, s)
		}
	}
	common := map[string]bool{}
	if len(protos) > 1 {
		for _, w := range strings.Split(protos[0], "_") {
			if !slices.ContainsFunc(protos, func(p string) bool { return !slices.Contains(strings.Split(p, "_"), w) }) {
				common[w] = true
			}
		}
	}
	for _, p := range protos {
		add(p)
		words := strings.Split(p, "_")
		for n := len(words) - 1; n >= 1; n-- {
			for i := 0; i+n <= len(words); i++ {
				run := words[i : i+n]
				if !slices.ContainsFunc(run, func(w string) bool { return !common[w] }) {
					continue
				}
				s := strings.Join(run, "_")
				add(strings.ToLower(s))
				add(strings.ToUpper(s))
			}
		}
	}
	for _, g := range genericValues {
		add(g)
	}
	return out
}

// caseVariants returns s in lower case, upper case and title case (first letter upper).
func caseVariants(s string) []string {
	lower := strings.ToLower(s)
	title := lower
	if title != "" {
		title = strings.ToUpper(title[:1]) + title[1:]
	}
	return []string{lower, strings.ToUpper(s), title}
}

// protoOf returns the proto name that spelling s stands for: the name itself in any case, else
// the shortest name of which s is a run of words ("private" is COLLECTIVES_PRIVATE_MEMORY), or
// "" when no name or two names of that length have it.
func protoOf(s string, protos []string) string {
	best, tie := "", false
	for _, p := range protos {
		if strings.EqualFold(p, s) {
			return p
		}
		if !strings.Contains("_"+p+"_", "_"+strings.ToUpper(s)+"_") {
			continue
		}
		switch {
		case best == "" || len(p) < len(best):
			best, tie = p, false
		case len(p) == len(best) && p != best:
			tie = true
		}
	}
	if tie {
		return ""
	}
	return best
}

// valueResult is what the derivation found for one flag: a row of the values table, or none
// and a note saying why.
type valueResult struct {
	name, form, values, evidence string // form empty: no row
	note                         string
	accepted                     int // spellings accepted, case variants of a fold flag counted once
}

// deriveValues probes every flag of flags and returns one result each, in the same order, and
// the number of children it started.
func deriveValues(ctx context.Context, p pjrtprobe.Prober, workers int, flags []valueFlag) ([]valueResult, int, error) {
	type job struct {
		flag  int
		value string
	}
	answers := make([]map[string]bool, len(flags)) // per flag: value -> accepted
	order := make([][]string, len(flags))          // per flag: values in the order they were first asked
	children := 0
	ask := func(jobs []job) error {
		var todo []job
		for _, j := range jobs {
			if answers[j.flag] == nil {
				answers[j.flag] = map[string]bool{}
			}
			if _, done := answers[j.flag][j.value]; done || slices.ContainsFunc(todo, func(t job) bool { return t == j }) {
				continue
			}
			todo = append(todo, j)
		}
		results := make([]bool, len(todo))
		err := parallel(workers, len(todo), func(i int) error {
			text := "--" + flags[todo[i].flag].name + "=" + todo[i].value
			r, err := p.Probe(ctx, text)
			switch {
			case err != nil:
				return err
			case r.Outcome == pjrtprobe.Accepted:
				results[i] = true
			case r.Outcome != pjrtprobe.BadValue:
				return fmt.Errorf("%s: %s, for a flag the plugin knows", text, r.Summary())
			}
			return nil
		})
		if err != nil {
			return err
		}
		children += len(todo)
		for i, j := range todo {
			answers[j.flag][j.value] = results[i]
			order[j.flag] = append(order[j.flag], j.value)
		}
		return nil
	}

	// Round 1: the text samples and every candidate spelling.
	var jobs []job
	for i, f := range flags {
		for _, v := range append(slices.Clone(textSamples), candidates(f.protos)...) {
			jobs = append(jobs, job{i, v})
		}
	}
	if err := ask(jobs); err != nil {
		return nil, children, err
	}
	isText := func(i int) bool {
		return !slices.ContainsFunc(textSamples, func(v string) bool { return !answers[i][v] })
	}
	acceptedSpellings := func(i int) []string {
		var out []string
		for _, v := range order[i] {
			if answers[i][v] && v != "" && v != probeText && !strings.ContainsAny(v, ",+") && !strings.HasPrefix(v, "-") {
				out = append(out, v)
			}
		}
		return out
	}
	// Round 2: the case variants of every accepted spelling; for lists, all of them at once
	// and +NAME/-NAME edits.
	jobs = nil
	joined := make([]string, len(flags)) // per list flag: its round 1 spellings, all at once
	for i, f := range flags {
		if isText(i) {
			continue
		}
		accepted := acceptedSpellings(i)
		joined[i] = strings.Join(accepted, ",")
		for _, v := range accepted {
			for _, variant := range caseVariants(v) {
				jobs = append(jobs, job{i, variant})
			}
		}
		if strings.HasPrefix(f.kind, "list") && len(accepted) > 0 {
			jobs = append(jobs, job{i, joined[i]}, job{i, "+" + accepted[0]}, job{i, "-" + accepted[0]})
			if len(accepted) > 1 {
				jobs = append(jobs, job{i, "+" + accepted[0] + ",-" + accepted[1]})
			}
		}
	}
	if err := ask(jobs); err != nil {
		return nil, children, err
	}

	out := make([]valueResult, len(flags))
	for i, f := range flags {
		out[i] = valueResult{name: f.name}
		tried := len(order[i])
		if isText(i) {
			out[i].form, out[i].evidence = "any", fmt.Sprintf("takes any text: %q, the empty value and %q", probeText, textSamples[2])
			continue
		}
		accepted := acceptedSpellings(i)
		if len(accepted) == 0 {
			out[i].note = fmt.Sprintf("refuses all %d spellings tried: no row, so Check refuses every value", tried)
			if answers[i][""] {
				out[i].note = fmt.Sprintf("takes the empty value only, of %d spellings tried: no row, so Check refuses every value", tried)
			}
			continue
		}
		if f.kind == "string" {
			out[i].note = "a string flag that takes some values only: declare its form in values.tsv"
			continue
		}
		fold := !slices.ContainsFunc(accepted, func(v string) bool {
			return slices.ContainsFunc(caseVariants(v), func(variant string) bool { return !answers[i][variant] })
		})
		var values []string
		for _, v := range accepted {
			if !slices.ContainsFunc(values, func(x string) bool { return x == v || fold && strings.EqualFold(x, v) }) {
				values = append(values, v)
			}
		}
		form, notes := "enum", []string{fmt.Sprintf("%d of %d spellings tried accepted", len(values), tried)}
		if strings.HasPrefix(f.kind, "list") {
			form = "names"
			if !answers[i][joined[i]] {
				return nil, children, fmt.Errorf("--%s takes each of %s alone but not all of them together: classify it by hand in values.tsv",
					f.name, joined[i])
			}
			notes = append(notes, "all of them together too")
		}
		if answers[i][""] {
			form += " empty"
			notes = append(notes, "the empty value too")
		}
		if strings.HasPrefix(f.kind, "list") && answers[i]["+"+accepted[0]] && answers[i]["-"+accepted[0]] &&
			(len(accepted) < 2 || answers[i]["+"+accepted[0]+",-"+accepted[1]]) {
			form += " edits"
			notes = append(notes, "+NAME/-NAME edits too")
		}
		if fold {
			form += " fold"
			notes = append(notes, "in lower, upper and title case")
		} else {
			notes = append(notes, "case-sensitive")
		}
		if len(f.protos) > 0 && !slices.ContainsFunc(values, func(v string) bool { return slices.Contains(f.protos, strings.ToUpper(v)) }) {
			notes = append(notes, "no proto name")
		}
		written := make([]string, len(values))
		for j, v := range values {
			written[j] = v
			if p := protoOf(v, f.protos); p != "" && !strings.EqualFold(p, v) {
				written[j] = v + "=" + p
			}
		}
		out[i].form, out[i].values, out[i].accepted = form, strings.Join(written, ","), len(values)
		out[i].evidence = strings.Join(notes, "; ")
	}
	return out, children, nil
}

// writeValues derives the values of the custom flags of the table rows known and writes them
// to o.values, for the build whose table is outFile.
func writeValues(ctx context.Context, o options, p pjrtprobe.Prober, plugin []byte, header string, outFile string, known []row) error {
	builds, err := readBuilds(filepath.Join(o.tables, "builds.tsv"))
	if err != nil {
		return err
	}
	key := ""
	for _, b := range builds {
		if b.file == outFile {
			key = b.key
		}
	}
	if key == "" {
		return fmt.Errorf("builds.tsv names no build with table %s", outFile)
	}
	customs, err := tsv(filepath.Join(o.tables, "custom.tsv"), 5)
	if err != nil {
		return err
	}
	declared := map[string]bool{} // flags whose values values.tsv gives for this build by hand
	hand, err := tsv(filepath.Join(o.tables, "values.tsv"), 5)
	if err != nil {
		return err
	}
	for _, h := range hand {
		if slices.Contains(strings.Split(h[0], ","), key) {
			declared[h[1]] = true
		}
	}
	enums := flagEnums(plugin)
	var flags []valueFlag
	var skipped []string
	for _, r := range known {
		if r[1] != "custom" {
			continue
		}
		i := slices.IndexFunc(customs, func(c []string) bool { return c[0] == r[0] })
		if i < 0 {
			return fmt.Errorf("%s has a setter of its own: classify it in custom.tsv first", r[0])
		}
		kind := customs[i][1]
		switch {
		case kind == "bool" || kind == "int32":
			continue
		case declared[r[0]]:
			skipped = append(skipped, r[0])
			continue
		}
		f := valueFlag{name: r[0], kind: kind}
		var defaults []string
		if d := strings.TrimPrefix(strings.Trim(r[2], `"`), "DebugOptions::"); d != "" && strings.Trim(d, "ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_,") == "" {
			defaults = strings.Split(d, ",")
		}
		for _, p := range slices.Concat(enums[r[0]], strings.Split(customs[i][2], ","), defaults) {
			if p != "" && !slices.Contains(f.protos, p) {
				f.protos = append(f.protos, p)
			}
		}
		flags = append(flags, f)
	}
	fmt.Fprintf(o.log, "plugintable: probing the values of %d custom flags\n", len(flags))
	results, children, err := deriveValues(ctx, p, o.workers, flags)
	if err != nil {
		return err
	}
	var b strings.Builder
	b.WriteString(header)
	rows, values := 0, 0
	for _, r := range results {
		if r.form != "" {
			rows++
			values += r.accepted
		}
	}
	fmt.Fprintf(&b, "# Probed %d custom flags in %d children: %d rows (%d spellings of enums and list items).\n", len(flags), children, rows, values)
	if len(skipped) > 0 {
		fmt.Fprintf(&b, "# Not probed, because values.tsv gives their form for %s by hand: %s.\n", key, strings.Join(skipped, ", "))
	}
	for _, r := range results {
		if r.note != "" {
			fmt.Fprintf(&b, "#   %s %s\n", r.name, r.note)
		}
	}
	for _, r := range results {
		if r.form != "" {
			fmt.Fprintf(&b, "%s\t%s\t%s\t%s\t%s\n", key, r.name, r.form, r.values, r.evidence)
		}
	}
	if err := os.WriteFile(o.values, []byte(b.String()), 0o644); err != nil {
		return err
	}
	fmt.Fprintf(o.log, "plugintable: wrote %s: %d rows, %d without (%d children)\n", o.values, rows, len(flags)-rows, children)
	return nil
}
