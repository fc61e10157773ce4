package flags

import (
	"fmt"
	"os"
	"strings"

	"github.com/onegpu/onegpu/internal/regularfile"
)

// EnvVar is the environment variable XLA reads its flags from, once per plugin, when the
// plugin's first client is created.
const EnvVar = "XLA_FLAGS"

// blanks are the characters XLA separates flags with. Other white space (\v, \f) is part of a
// token, as in XLA.
const blanks = " \t\r\n"

// token is one argument produced by XLA's flag-string parser.
type token struct {
	arg          string // the argument as XLA hands it to its flag matcher, quotes removed
	quoted       bool   // written --name="value" or --name='value'
	unterminated bool   // the quote is never closed: the value runs to the end of the text
}

// tokenize splits text the way XLA's ParseArgvFromString does:
//   - tokens are separated by blanks (space, tab, CR, LF);
//   - a token starts with '-'; at the first token that does not, XLA stops and ignores the
//     rest of the text, which tokenize returns as rest;
//   - a token runs to the next blank, except that --name='...' or --name="..." (the quote
//     right after the '=' that follows the name) takes everything up to the closing quote;
//     inside double quotes a backslash takes the next character literally, inside single
//     quotes nothing is special, and a quote never closed takes the rest of the text;
//   - the name is the run of ASCII letters, digits, '-' and '_' after which the quote is looked for.
//
// Only text holding NUL bytes is split differently (XLA's C string functions treat NUL as a
// name character and as a quote); Parse reports such text as an error.
func tokenize(text string) (args []token, rest string) {
	b := skip(text, 0)
	for b < len(text) && text[b] == '-' {
		e := b
		for e < len(text) && isNameByte(text[e]) {
			e++
		}
		if e+1 < len(text) && text[e] == '=' && (text[e+1] == '\'' || text[e+1] == '"') {
			quote := text[e+1]
			var value strings.Builder
			i := e + 2
			for ; i < len(text) && text[i] != quote; i++ {
				if quote == '"' && text[i] == '\\' && i+1 < len(text) {
					i++
				}
				value.WriteByte(text[i])
			}
			t := token{arg: text[b:e+1] + value.String(), quoted: true, unterminated: i == len(text)}
			if i < len(text) {
				i++ // past the closing quote
			}
			args = append(args, t)
			e = i
		} else {
			if n := strings.IndexAny(text[e:], blanks); n >= 0 {
				e += n
			} else {
				e = len(text)
			}
			args = append(args, token{arg: text[b:e]})
		}
		b = skip(text, e)
	}
	return args, text[b:]
}

// skip returns the index of the first non-blank byte of text at or after i.
func skip(text string, i int) int {
	for i < len(text) && strings.IndexByte(blanks, text[i]) >= 0 {
		i++
	}
	return i
}

func isNameByte(c byte) bool {
	return c == '-' || c == '_' || '0' <= c && c <= '9' || 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z'
}

// Parse splits flag text (the value of XLA_FLAGS, or the contents of a flags file) into the
// settings XLA would see, following XLA's rules exactly (see tokenize). Flags are not checked
// against a build here: Set.Check does that. The error lists what XLA would silently drop or
// misread: text after the first token that does not start with '-' (often the value of a
// `--flag value` written with a space), a quote never closed, and NUL bytes. The Set is
// returned either way and keeps those problems, so that Set.Check reports them too.
func Parse(text string) (Set, error) {
	return parse(text, "")
}

func parse(text, source string) (Set, error) {
	var s Set
	if i := strings.IndexByte(text, 0); i >= 0 {
		s.syntax = append(s.syntax, Problem{
			Flag:    "NUL",
			Message: fmt.Sprintf("the text holds a NUL byte at offset %d, which no environment variable can carry", i),
			Fix:     "remove it",
		})
	}
	args, rest := tokenize(text)
	for _, t := range args {
		st := settingOf(t.arg)
		st.Source = source
		s.settings = append(s.settings, st)
		if t.unterminated {
			s.syntax = append(s.syntax, Problem{
				Flag:    st.problemName(),
				Message: "its quote is never closed, so XLA takes all the rest of the text as its value",
				Fix:     "close the quote",
			})
		}
	}
	if rest != "" {
		s.syntax = append(s.syntax, droppedTail(args, rest))
	}
	return s, errorOf(s.syntax)
}

// droppedTail describes the text XLA ignores because it does not start with '-'.
func droppedTail(args []token, rest string) Problem {
	word := rest
	if i := strings.IndexAny(word, blanks); i >= 0 {
		word = word[:i]
	}
	p := Problem{
		Flag: word,
		Message: fmt.Sprintf("XLA stops reading flags at %q because it does not start with '-', "+
			"and silently ignores it and everything after it", clip(rest, 60)),
		Fix: "start every flag with --, and quote values holding blanks: --name='a b'",
	}
	if len(args) > 0 {
		if prev := settingOf(args[len(args)-1].arg); prev.Name != "" && !prev.HasValue {
			p.Flag = prev.Name
			p.Message = fmt.Sprintf("--%s %s has a blank before its value: %s", prev.Name, word, p.Message)
			p.Fix = fmt.Sprintf("write --%s=%s", prev.Name, word)
		}
	}
	return p
}

func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "..."
}

// ParseEnv parses a value of XLA_FLAGS the way XLA reads the variable: an empty value holds no
// flags; a value whose first non-blank character is '-' holds the flags; any other value is
// the name of a file holding them, which XLA aborts on when it cannot open it (so does
// ParseEnv, with an error). Settings are labelled as coming from XLA_FLAGS.
func ParseEnv(value string) (Set, error) {
	if value == "" {
		return Set{}, nil
	}
	if i := skip(value, 0); i < len(value) && value[i] == '-' {
		return parse(value, EnvVar)
	}
	data, err := regularfile.ReadLinked(value, regularfile.MaxSmallBytes) // a FIFO or a device would hang or fill memory
	if err != nil {
		s := Set{syntax: []Problem{{
			Flag: EnvVar,
			Message: fmt.Sprintf("%s=%q does not start with '-', so XLA reads it as the name of a flags file, "+
				"and aborts because it cannot open it (%v)", EnvVar, value, err),
			Fix: "write the flags themselves, starting with --, or name a readable file (or leave " + EnvVar + " empty)",
		}}}
		return s, errorOf(s.syntax)
	}
	return parse(string(data), EnvVar+" file "+value)
}

// Environment parses this process's XLA_FLAGS with ParseEnv.
func Environment() (Set, error) {
	return ParseEnv(os.Getenv(EnvVar))
}
