package flags

import (
	"fmt"
	"math"
	"strconv"
	"strings"
)

// abortUnknown is what XLA does with a flag it does not define.
const abortUnknown = `XLA aborts the process with "Unknown flags in XLA_FLAGS"`

// Check reports what build b of XLA would do with every setting of s, before any plugin reads
// them. The error (a Problems) lists each setting that would abort the process (unknown and
// removed flags, values XLA cannot parse, a value-taking flag written without '='), each one
// XLA would silently misread or drop, and the tokenizing problems Parse found. Values of flags
// that XLA parses with setters of their own (Flag.Form) must be ones the build is known to
// accept: a value onegpu does not know for the build is an error, never a guess. Each problem
// names the flag, the build and the fix. The warnings list settings XLA accepts that do nothing
// or may stop working (deprecated flags).
func (s Set) Check(b Build) (warnings []Problem, err error) {
	if _, ok := infoOf(b); !ok {
		_, err := ParseBuild(string(b))
		return nil, err
	}
	var errs []Problem
	for _, p := range s.syntax {
		p.Build = b
		errs = append(errs, p)
	}
	for _, st := range s.settings {
		w, e := checkSetting(st, b)
		warnings = append(warnings, w...)
		errs = append(errs, e...)
	}
	return warnings, errorOf(errs)
}

// checkSetting returns the warnings and errors of one setting on build b.
func checkSetting(st Setting, b Build) (warnings, errs []Problem) {
	fail := func(message, fix string) []Problem {
		return []Problem{{Flag: st.problemName(), Build: b, Message: message, Fix: fix}}
	}
	switch {
	case st.Token == "--":
		return nil, fail(`XLA takes "--" and every flag after it as unknown flags and aborts the process`, "remove the --")
	case st.Name == "" && strings.HasPrefix(st.Token, "--="):
		return nil, fail("a flag without a name: "+abortUnknown, "write --name=value")
	case st.Name == "":
		return nil, fail("flags start with two dashes: "+abortUnknown, "write --"+strings.TrimLeft(st.Token, "-"))
	}
	f, ok := b.Lookup(st.Name)
	if !ok {
		why, fix := absentFlag(st.Name, b)
		return nil, fail(why+": "+abortUnknown, fix)
	}
	if f.Deprecated {
		w := Problem{Flag: f.Name, Build: b, Message: "deprecated: XLA still reads it but may drop it in a later build"}
		if f.NoOp {
			w.Message = "deprecated: XLA accepts it and ignores it"
		}
		if r, ok := replacements[f.Name]; ok {
			w.Fix = r.fix()
		} else {
			w.Fix = "drop it"
		}
		warnings = append(warnings, w)
	}
	if r, ok := cpuRefusesOn[f.Name]; ok && b.CPU() && f.Kind == KindBool &&
		(!st.HasValue || strings.EqualFold(st.Value, "true") || st.Value == "1") {
		return warnings, fail(r, "--"+f.Name+"=false, or leave it out")
	}
	if !st.HasValue {
		if f.Kind == KindBool {
			return warnings, nil // a bare bool flag means true
		}
		return warnings, fail(fmt.Sprintf("--%s takes a value (%s) after '=': XLA knows no bare --%s, so %s",
			f.Name, f.Type(), f.Name, abortUnknown), f.Syntax())
	}
	if f.Form == FormUnknown {
		return warnings, fail(fmt.Sprintf("onegpu does not know which values %s accepts for --%s, and XLA aborts the process "+
			"(\"Flag parsing failed\") on a value its setter does not take", b, f.Name), unknownValuesFix(f.Name, b))
	}
	if message := badValue(f, st.Value); message != "" {
		return warnings, fail(message, f.Syntax())
	}
	return warnings, nil
}

// unknownValuesFix says what to do with a flag whose values onegpu does not know for build b:
// leave it unset, or use a build whose values onegpu knows.
func unknownValuesFix(name string, b Build) string {
	fix := "leave --" + name + " unset on " + string(b)
	var known []string
	for _, other := range Builds() {
		f, ok := other.Lookup(name)
		switch {
		case !ok || f.Form == FormUnknown:
		case f.Form == FormAny:
			known = append(known, fmt.Sprintf("%s (any text)", other))
		default:
			known = append(known, fmt.Sprintf("%s (%s)", other, strings.TrimPrefix(f.Syntax(), "--"+name+"=")))
		}
	}
	if len(known) > 0 {
		fix += ", or use a build whose values onegpu knows: " + strings.Join(known, "; ")
	}
	return fix
}

// cpuRefusesOn holds the bool flags that XLA's CPU plugins refuse to turn on, although true is
// a bool: their setters first check for a CUDA library, which a CPU plugin does not link. The
// value says why. TestPluginJudge found them, with lammps-jax-pjrt-cpu 0.11.2 as the judge.
var cpuRefusesOn = map[string]string{
	"xla_gpu_enable_libnvptxcompiler": `a CPU plugin has no libnvptxcompiler: XLA refuses to turn it on and aborts the process ("Flag parsing failed")`,
}

// absentFlag explains why build b does not define the flag called name ("removed by cpu-0.83
// (last defined by jax-0.4.25)": the first build without it, of those onegpu knows), and what
// to write instead. A flag that only later builds define is "too new", and the build named as
// its first is one of b's kind where there is one (a CPU build for a CPU build, any other for
// the others), so that a CUDA user is not sent to a CPU plugin.
func absentFlag(name string, b Build) (why, fix string) {
	last, removedIn, first, firstOther := Build(""), Build(""), Build(""), Build("")
	for _, info := range builds {
		_, defined := info.build.Lookup(name)
		switch {
		case info.build.order() < b.order() && defined:
			last, removedIn = info.build, ""
		case info.build.order() <= b.order() && !defined && last != "" && removedIn == "":
			removedIn = info.build
		case info.build.order() > b.order() && defined && info.build.CPU() == b.CPU() && first == "":
			first = info.build
		case info.build.order() > b.order() && defined && firstOther == "":
			firstOther = info.build
		}
	}
	if first == "" {
		first = firstOther
	}
	switch {
	case last != "":
		why = fmt.Sprintf("removed by %s (last defined by %s)", removedIn, last)
		if r, ok := replacements[name]; ok {
			return why, r.fix()
		}
		return why, "drop it: XLA has no replacement for it"
	case first != "":
		return fmt.Sprintf("too new for %s (first defined by %s)", b, first),
			fmt.Sprintf("drop it, or use a plugin of %s or later", first)
	}
	why = "not a flag of " + string(b)
	if near := nearestFlag(name, b); near != "" {
		return why, "did you mean --" + near + "?"
	}
	return why, "drop it"
}

// nearestFlag returns the flag of b whose name is closest to name, if it is close enough to be
// a likely typo.
func nearestFlag(name string, b Build) string {
	best, bestDistance := "", len(name)/4+2
	for _, f := range b.Flags() {
		if d := editDistance(name, f.Name, bestDistance); d < bestDistance {
			best, bestDistance = f.Name, d
		}
	}
	return best
}

// editDistance returns the Levenshtein distance between a and b, or limit when it is at least limit.
func editDistance(a, b string, limit int) int {
	if d := len(a) - len(b); d >= limit || -d >= limit {
		return limit
	}
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		rowMin := cur[0]
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
			rowMin = min(rowMin, cur[j])
		}
		if rowMin >= limit {
			return limit
		}
		prev, cur = cur, prev
	}
	return min(prev[len(b)], limit)
}

// accepts reports whether v is one of f.Values, in any case when f.FoldCase.
func (f Flag) accepts(v string) bool {
	for _, x := range f.Values {
		if x == v || f.FoldCase && strings.EqualFold(x, v) {
			return true
		}
	}
	return false
}

// setterRefuses ends the message of a value that one of XLA's own setters refuses.
const setterRefuses = `: XLA's setter refuses it and aborts the process ("Flag parsing failed")`

// badValue returns why XLA would reject or silently distort value for flag f, or "".
//
// XLA parses values with tsl's flag parser. Older builds parse numbers with sscanf("%d%c"),
// newer ones with absl::SimpleAtoi/SimpleAtof; a value is accepted here only when both accept
// it with the same meaning, and out-of-range numbers (which one parser wraps or saturates
// silently) are rejected.
func badValue(f Flag, value string) string {
	switch f.Kind {
	case KindBool:
		if !strings.EqualFold(value, "true") && !strings.EqualFold(value, "false") && value != "1" && value != "0" {
			return fmt.Sprintf(`%q is not a bool: XLA accepts true, false, 1 or 0 and aborts the process on anything else ("Couldn't interpret value")`, value)
		}
	case KindInt:
		bits := f.Bits
		if bits == 0 {
			bits = 32
		}
		if problem := checkInt(value, bits); problem != "" {
			return fmt.Sprintf("%q %s", value, problem)
		}
		if f.Ranged {
			if n := parseCInt(value); n < f.Min || n > f.Max {
				return fmt.Sprintf("%q is outside %d..%d, the values XLA handles for --%s: %s", value, f.Min, f.Max, f.Name, f.OutOfRange)
			}
		}
	case KindFloat:
		if problem := checkFloat32(value); problem != "" {
			return fmt.Sprintf("%q %s", value, problem)
		}
	}
	if f.Name == backendExtraOptions {
		return backendOptionsProblem(value)
	}
	return formProblem(f, value)
}

// formProblem returns why the build's setter for f refuses value, given f.Form, or "".
func formProblem(f Flag, value string) string {
	switch f.Form {
	case FormUnknown:
		return "onegpu does not know which values the build accepts for --" + f.Name +
			", and XLA aborts the process (\"Flag parsing failed\") on a value its setter does not take"
	case FormEnum:
		switch {
		case value == "" && f.AcceptsEmpty, value != "" && f.accepts(value):
			return ""
		case value == "":
			return "the build takes no empty value for --" + f.Name + setterRefuses
		}
		return fmt.Sprintf("%q is not a value the build accepts for --%s (%s)%s", value, f.Name, f.valueList(), setterRefuses)
	case FormNames:
		return namesProblem(f, value)
	case FormPairs:
		return pairsProblem(value)
	case FormRanges:
		return rangesProblem(value)
	case FormDuration:
		if !isDuration(value) {
			return fmt.Sprintf("%q is not a duration (30s, 1h30m, 1.5ms, 0, inf)%s", value, setterRefuses)
		}
	}
	return ""
}

// valueList describes f.Values for a message: "none, warning, fail", and "in any case".
func (f Flag) valueList() string {
	s := strings.Join(f.Values, ", ")
	if f.FoldCase {
		s += ", in any case"
	}
	return s
}

// namesProblem checks a FormNames list: plain items of f.Values, or (when f.AcceptsEdits) items
// that all start with + or -, or (when f.AcceptsEmpty) nothing at all.
func namesProblem(f Flag, value string) string {
	if value == "" {
		if f.AcceptsEmpty {
			return ""
		}
		return "the build takes no empty list for --" + f.Name + setterRefuses
	}
	items := strings.Split(value, ",")
	signed := 0
	for _, item := range items {
		if item != "" && (item[0] == '+' || item[0] == '-') {
			signed++
		}
	}
	switch {
	case signed > 0 && !f.AcceptsEdits:
		return fmt.Sprintf("%q: the build's --%s takes no +NAME/-NAME items%s", value, f.Name, setterRefuses)
	case signed > 0 && signed < len(items):
		return fmt.Sprintf("%q mixes +NAME/-NAME items with plain ones, which XLA takes only apart%s", value, setterRefuses)
	}
	for _, item := range items {
		if signed > 0 {
			item = item[1:]
		}
		if !f.accepts(item) {
			if item == "" {
				return fmt.Sprintf("%q has an empty item%s", value, setterRefuses)
			}
			return fmt.Sprintf("%q is not an item the build accepts for --%s (%s)%s", item, f.Name, f.valueList(), setterRefuses)
		}
	}
	return ""
}

// pairsProblem checks xla_fuel's form: PASS=N items, PASS not empty, N an int64.
func pairsProblem(value string) string {
	if value == "" {
		return "xla_fuel's setter reads the empty value as one item without '=' (\"Illegal value for --xla_fuel\")" + setterRefuses
	}
	for _, item := range strings.Split(value, ",") {
		name, n, ok := strings.Cut(item, "=")
		if !ok || name == "" || strings.Contains(n, "=") || checkInt(n, 64) != "" || strings.TrimLeft(n, cSpace) != n {
			return fmt.Sprintf("%q is not PASS=N with N an integer (\"Illegal value for --xla_fuel\")%s", item, setterRefuses)
		}
	}
	return ""
}

// rangesProblem checks a FormRanges value: items N, N:M (N <= M), N: or :M of non-negative
// int64 numbers written with digits only.
func rangesProblem(value string) string {
	index := func(s string) (int64, bool) {
		if s == "" || strings.Trim(s, "0123456789") != "" || checkInt(s, 64) != "" {
			return 0, false
		}
		n, err := strconv.ParseInt(s, 10, 64)
		return n, err == nil
	}
	for _, item := range strings.Split(value, ",") {
		lo, hi, colon := strings.Cut(item, ":")
		start, okStart := index(lo)
		end, okEnd := index(hi)
		switch {
		case !colon && okStart, colon && okStart && hi == "", colon && lo == "" && okEnd:
			continue
		case colon && okStart && okEnd && start <= end:
			continue
		case colon && okStart && okEnd:
			return fmt.Sprintf("%q is a range whose start is after its end%s", item, setterRefuses)
		}
		return fmt.Sprintf("%q is not a range N, N:M, N: or :M of non-negative integers%s", item, setterRefuses)
	}
	return ""
}

// isDuration reports whether s is a duration as absl::ParseDuration reads it: an optional sign,
// then 0, inf, or numbers each followed by a unit (ns, us, ms, s, m, h), as in 1h30m or 1.5s.
// Integer parts longer than 15 digits are refused, so that no value can overflow.
func isDuration(s string) bool {
	if len(s) > 0 && (s[0] == '+' || s[0] == '-') {
		s = s[1:]
	}
	if s == "0" || s == "inf" {
		return true
	}
	if s == "" {
		return false
	}
	for s != "" {
		i, whole := 0, 0
		for i < len(s) && s[i] >= '0' && s[i] <= '9' {
			i, whole = i+1, whole+1
		}
		frac := 0
		if i < len(s) && s[i] == '.' {
			i++
			for i < len(s) && s[i] >= '0' && s[i] <= '9' {
				i, frac = i+1, frac+1
			}
		}
		if whole+frac == 0 || whole > 15 {
			return false
		}
		s = s[i:]
		unit := ""
		for _, u := range []string{"ns", "us", "ms", "s", "m", "h"} {
			if strings.HasPrefix(s, u) {
				unit = u
				break
			}
		}
		if unit == "" {
			return false
		}
		s = s[len(unit):]
	}
	return true
}

// checkInt returns why value is not a decimal integer of the given width for XLA, or "".
func checkInt(value string, bits int) string {
	s := strings.TrimLeft(value, cSpace)
	notInt := fmt.Sprintf(`is not an int%d: XLA aborts the process ("Couldn't interpret value")`, bits)
	if s != "" && (s[0] == '+' || s[0] == '-') {
		s = s[1:]
	}
	if s == "" {
		return notInt
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return notInt
		}
	}
	digits := strings.TrimLeft(s, "0")
	limit := fmt.Sprint(uint64(1) << (bits - 1)) // |min|; max is one less
	negative := strings.HasPrefix(strings.TrimLeft(value, cSpace), "-")
	if len(digits) > len(limit) || len(digits) == len(limit) && (digits > limit || digits == limit && !negative) {
		return fmt.Sprintf("is out of the int%d range [%d, %d]: XLA rejects it or silently stores another number",
			bits, -(int64(1) << (bits - 1)), int64(uint64(1)<<(bits-1)-1))
	}
	return ""
}

// parseCInt reads a value checkInt accepted: blanks, a sign, then decimal digits.
func parseCInt(value string) int64 {
	s := strings.TrimLeft(value, cSpace)
	s = strings.TrimPrefix(s, "+")
	n, _ := strconv.ParseInt(s, 10, 64) // checkInt bounds it to 64 bits
	return n
}

// cSpace is what C's isspace accepts; sscanf and absl both skip it before a number.
const cSpace = " \t\n\v\f\r"

// checkFloat32 returns why value is not a float32 for XLA, or "". It accepts decimal numbers
// with an optional sign, fraction and exponent, and inf, infinity and nan in any case: what
// both sscanf("%f") and absl::SimpleAtof accept. Hexadecimal floats are rejected (absl does).
func checkFloat32(value string) string {
	notFloat := `is not a float: XLA aborts the process ("Couldn't interpret value")`
	s := strings.TrimLeft(value, cSpace)
	if s != "" && (s[0] == '+' || s[0] == '-') {
		s = s[1:]
	}
	switch strings.ToLower(s) {
	case "inf", "infinity", "nan":
		return ""
	case "":
		return notFloat
	}
	i, digits := 0, 0
	for i < len(s) && s[i] >= '0' && s[i] <= '9' {
		i, digits = i+1, digits+1
	}
	if i < len(s) && s[i] == '.' {
		i++
		for i < len(s) && s[i] >= '0' && s[i] <= '9' {
			i, digits = i+1, digits+1
		}
	}
	if digits == 0 {
		return notFloat
	}
	if i < len(s) && (s[i] == 'e' || s[i] == 'E') {
		i++
		if i < len(s) && (s[i] == '+' || s[i] == '-') {
			i++
		}
		start := i
		for i < len(s) && s[i] >= '0' && s[i] <= '9' {
			i++
		}
		if i == start {
			return notFloat
		}
	}
	if i != len(s) {
		return notFloat
	}
	if f, err := strconv.ParseFloat(s, 32); err != nil && math.IsInf(f, 0) {
		return "overflows float32: XLA silently turns it into infinity"
	}
	return ""
}
