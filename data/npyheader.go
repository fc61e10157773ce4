package data

import (
	"fmt"
	"slices"
	"strings"
	"unicode"
)

// npyHeaderKeys are the keys of a .npy header: numpy writes exactly these and refuses a header
// with others or fewer ("Header does not contain the correct keys").
var npyHeaderKeys = []string{"descr", "fortran_order", "shape"}

// parseNPYHeader parses a .npy header, the Python literal of a dict with string keys whose values
// are strings, True/False or tuples of integers, as numpy does (ast.literal_eval): a key given
// twice takes its last value. It returns the values of npyHeaderKeys: descr's string,
// fortran_order's bool and shape's integers (as written, for messages too).
func parseNPYHeader(header string) (descr string, fortran bool, shape []string, err error) {
	p := pyLiteral{text: strings.TrimRight(header, " \n")}
	values, err := p.dict()
	if err != nil {
		return "", false, nil, err
	}
	for key := range values {
		if !slices.Contains(npyHeaderKeys, key) {
			return "", false, nil, fmt.Errorf("unknown key %q (numpy writes %s)", key, strings.Join(npyHeaderKeys, ", "))
		}
	}
	for _, key := range npyHeaderKeys {
		if _, ok := values[key]; !ok {
			return "", false, nil, fmt.Errorf("no %q (numpy writes %s)", key, strings.Join(npyHeaderKeys, ", "))
		}
	}
	var ok bool
	if descr, ok = values["descr"].(string); !ok {
		return "", false, nil, fmt.Errorf("descr %v is not a string (onegpu reads simple dtypes, not records)", values["descr"])
	}
	if fortran, ok = values["fortran_order"].(bool); !ok {
		return "", false, nil, fmt.Errorf("fortran_order %v is not True or False", values["fortran_order"])
	}
	if shape, ok = values["shape"].([]string); !ok {
		return "", false, nil, fmt.Errorf("shape %v is not a tuple of integers", values["shape"])
	}
	return descr, fortran, shape, nil
}

// pyLiteral parses the Python literals of a .npy header.
type pyLiteral struct {
	text string
	pos  int
}

func (p *pyLiteral) skipSpace() {
	for p.pos < len(p.text) && unicode.IsSpace(rune(p.text[p.pos])) {
		p.pos++
	}
}

// expect consumes c after spaces, or returns an error saying what came instead.
func (p *pyLiteral) expect(c byte) error {
	p.skipSpace()
	if p.pos >= len(p.text) || p.text[p.pos] != c {
		return p.errorf("want %q", c)
	}
	p.pos++
	return nil
}

// peek returns the next byte after spaces (0 at the end).
func (p *pyLiteral) peek() byte {
	p.skipSpace()
	if p.pos >= len(p.text) {
		return 0
	}
	return p.text[p.pos]
}

func (p *pyLiteral) errorf(format string, args ...any) error {
	return fmt.Errorf("at byte %d of %q: %s", p.pos, p.text, fmt.Sprintf(format, args...))
}

// dict parses the whole text as {key: value, ...} with an optional trailing comma.
func (p *pyLiteral) dict() (map[string]any, error) {
	if err := p.expect('{'); err != nil {
		return nil, err
	}
	values := map[string]any{}
	for p.peek() != '}' {
		key, err := p.string()
		if err != nil {
			return nil, err
		}
		if err := p.expect(':'); err != nil {
			return nil, err
		}
		if values[key], err = p.value(); err != nil {
			return nil, err
		}
		if p.peek() != ',' {
			break
		}
		p.pos++
	}
	if err := p.expect('}'); err != nil {
		return nil, err
	}
	if p.peek() != 0 {
		return nil, p.errorf("text after the dict")
	}
	return values, nil
}

// value parses a string, True, False or a tuple of integers.
func (p *pyLiteral) value() (any, error) {
	switch c := p.peek(); {
	case c == '\'' || c == '"':
		return p.string()
	case c == '(':
		return p.tuple()
	case strings.HasPrefix(p.text[p.pos:], "True"):
		p.pos += 4
		return true, nil
	case strings.HasPrefix(p.text[p.pos:], "False"):
		p.pos += 5
		return false, nil
	}
	return nil, p.errorf("want a string, True, False or a tuple")
}

// string parses a quoted string without escapes (numpy's keys and type strings have none).
func (p *pyLiteral) string() (string, error) {
	q := p.peek()
	if q != '\'' && q != '"' {
		return "", p.errorf("want a quoted string")
	}
	end := strings.IndexByte(p.text[p.pos+1:], q)
	if end < 0 {
		return "", p.errorf("unterminated string")
	}
	s := p.text[p.pos+1 : p.pos+1+end]
	if strings.ContainsRune(s, '\\') {
		return "", p.errorf("escapes in strings are not read")
	}
	p.pos += end + 2
	return s, nil
}

// tuple parses (int, int, ...) with an optional trailing comma; () is the scalar's shape.
func (p *pyLiteral) tuple() ([]string, error) {
	if err := p.expect('('); err != nil {
		return nil, err
	}
	items := []string{}
	for p.peek() != ')' {
		start := p.pos
		if p.pos < len(p.text) && (p.text[p.pos] == '-' || p.text[p.pos] == '+') {
			p.pos++
		}
		for p.pos < len(p.text) && p.text[p.pos] >= '0' && p.text[p.pos] <= '9' {
			p.pos++
		}
		item := p.text[start:p.pos]
		if p.pos < len(p.text) && p.text[p.pos] == 'L' { // Python 2 wrote long integers so
			p.pos++
		}
		if !isDigits(strings.TrimPrefix(strings.TrimPrefix(item, "-"), "+")) {
			return nil, p.errorf("want an integer")
		}
		items = append(items, item)
		if p.peek() != ',' {
			break
		}
		p.pos++
	}
	return items, p.expect(')')
}

func isDigits(s string) bool {
	if s == "" {
		return false
	}
	for _, c := range s {
		if c < '0' || c > '9' {
			return false
		}
	}
	return true
}
