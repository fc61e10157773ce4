package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/onegpu/onegpu/analysis"
	"github.com/onegpu/onegpu/internal/regularfile"
	"github.com/onegpu/onegpu/tokenizer"
)

func init() {
	register(command{
		name:    "tokenize",
		summary: "text to token ids and back with a Hugging Face tokenizer.json, as the tokenizers library does",
		run:     func(args []string) error { return runTokenize(args, os.Stdin, os.Stdout, os.Stderr) },
	})
}

// runTokenize encodes each input line (or JSON value, with --jsonl) into token ids, or with
// --decode each line of ids into text; a summary goes to stderr.
func runTokenize(args []string, stdin io.Reader, stdout, stderr io.Writer) error {
	fs := newFlagSet("tokenize", "--tokenizer DIR [--input FILE] [--jsonl] [--special=false] [--json] | --decode [--skip-special]")
	dir := fs.String("tokenizer", "", "Hugging Face tokenizer: a folder with tokenizer.json (and tokenizer_config.json, generation_config.json), or the file")
	input := fs.String("input", "", "read from this file instead of stdin: a regular file, or a link to one")
	jsonl := fs.Bool("jsonl", false, `each input line is a JSON string, or an object whose "text" is one: for texts with line breaks`)
	special := fs.Bool("special", true, "add the tokenizer's special tokens around each text (its template's BOS, as add_special_tokens=True)")
	asJSON := fs.Bool("json", false, "print each line's ids as a JSON array (with --decode: each text as a JSON string)")
	decode := fs.Bool("decode", false, "read ids (space- or comma-separated, or a JSON array, one sequence a line) and print their text")
	skipSpecial := fs.Bool("skip-special", false, "with --decode: leave special tokens (BOS, EOS, <|eot_id|>) out of the text")
	if err := parseArgs(fs, args); err != nil {
		return err
	}
	set := given(fs)
	switch {
	case *dir == "":
		return errors.New("tokenize needs --tokenizer DIR: a Hugging Face folder with tokenizer.json, or the file")
	case *decode && *jsonl:
		return errors.New("--jsonl reads texts and --decode reads ids: give one of them")
	case *decode && set["special"]:
		return errors.New("--special adds tokens when encoding; with --decode, --skip-special leaves them out")
	case !*decode && set["skip-special"]:
		return errors.New("--skip-special is for --decode; when encoding, --special=false leaves special tokens out")
	}
	tok, err := tokenizer.Load(*dir)
	if err != nil {
		return fmt.Errorf("--tokenizer: %w", err)
	}
	name := "stdin"
	if *input != "" {
		// A named pipe or a device (a link to /dev/zero) would block or never end: the file is
		// refused before it is opened, as every file onegpu reads (stdin stays for pipes).
		f, err := regularfile.OpenLinked(*input)
		if err != nil {
			return fmt.Errorf("--input: %w", err)
		}
		defer f.Close()
		stdin, name = f, *input
	}
	in := bufio.NewReaderSize(stdin, 1<<20)
	out := bufio.NewWriterSize(stdout, 1<<20)
	var jsonBuf bytes.Buffer
	enc := json.NewEncoder(&jsonBuf)
	enc.SetEscapeHTML(false) // keep "<|eot_id|>" readable
	start := time.Now()
	lines, tokens, textBytes := 0, 0, 0
	for {
		line, err := readLine(in, maxLineBytes)
		if err == io.EOF {
			break
		}
		if err != nil {
			return fmt.Errorf("%s line %d: %w", name, lines+1, err)
		}
		lines++
		if *decode {
			ids, err := parseIDs(line, tok.VocabSize())
			if err != nil {
				return fmt.Errorf("%s line %d: %w", name, lines, err)
			}
			text := tok.Decode(ids, *skipSpecial)
			tokens, textBytes = tokens+len(ids), textBytes+len(text)
			if *asJSON {
				jsonBuf.Reset()
				enc.Encode(text)
				out.Write(bytes.TrimSuffix(jsonBuf.Bytes(), []byte("\n")))
			} else {
				out.WriteString(text)
			}
		} else {
			text := line
			if *jsonl {
				if text, err = jsonText(line); err != nil {
					return fmt.Errorf("%s line %d: %w", name, lines, err)
				}
			}
			ids := tok.Encode(text, *special)
			tokens, textBytes = tokens+len(ids), textBytes+len(text)
			writeIDs(out, ids, *asJSON)
		}
		out.WriteByte('\n')
	}
	if err := out.Flush(); err != nil {
		return err
	}
	secs := time.Since(start).Seconds()
	fmt.Fprintf(stderr, "onegpu tokenize: %s of %s, %d tokens, %d bytes of text in %.2f s (%.1f MB/s)\n",
		plural(lines, "line"), name, tokens, textBytes, secs, float64(textBytes)/max(secs, 1e-9)/1e6)
	return nil
}

// maxLineBytes bounds one line of tokenize's input, read whole before it is encoded: a file of
// zeros without a line break (a sparse file, stdin from /dev/zero) would otherwise grow the line
// until the process runs out of memory. 256 MiB is far more than one text a line (or a --jsonl
// document) holds.
const maxLineBytes = 256 << 20

// readLine returns the next line without its end ("\n" or "\r\n", as bufio.ScanLines), io.EOF
// after the last; a line of more than limit bytes without its end is an error, returned as soon
// as limit+2 bytes without a line break have been read.
func readLine(r *bufio.Reader, limit int) (string, error) {
	var line []byte
	for {
		chunk, err := r.ReadSlice('\n')
		line = append(line, chunk...)
		if err == bufio.ErrBufferFull {
			if len(line) > limit+2 {
				break
			}
			continue
		}
		if err == io.EOF && len(line) == 0 {
			return "", io.EOF
		}
		if err != nil && err != io.EOF {
			return "", err
		}
		break
	}
	line = bytes.TrimSuffix(line, []byte("\n"))
	line = bytes.TrimSuffix(line, []byte("\r"))
	if len(line) > limit {
		return "", fmt.Errorf("longer than %d bytes (%s): tokenize reads a line at a time; split the text into lines", limit, analysis.FormatBytes(int64(limit)))
	}
	return string(line), nil
}

// jsonText returns the text of a --jsonl line: a JSON string, or an object's "text" string.
func jsonText(line string) (string, error) {
	var v any
	if err := json.Unmarshal([]byte(line), &v); err != nil {
		return "", fmt.Errorf("not JSON (--jsonl reads one JSON value a line): %v", err)
	}
	switch v := v.(type) {
	case string:
		return v, nil
	case map[string]any:
		text, ok := v["text"].(string)
		if !ok {
			return "", errors.New(`an object without a "text" string (--jsonl reads a string or {"text": ...} a line)`)
		}
		return text, nil
	}
	kind := map[bool]string{true: "an array", false: "a number, true, false or null"}[isArray(v)]
	return "", fmt.Errorf("%s, not a string or an object with \"text\" (--jsonl reads one of those a line)", kind)
}

func isArray(v any) bool {
	_, ok := v.([]any)
	return ok
}

// parseIDs reads a line of ids: a JSON array, or numbers separated by spaces or commas. Each must
// be a token of the tokenizer (0 to vocab-1).
func parseIDs(line string, vocab int) ([]int, error) {
	var ids []int
	if strings.HasPrefix(strings.TrimSpace(line), "[") {
		if err := json.Unmarshal([]byte(line), &ids); err != nil {
			return nil, fmt.Errorf("not a JSON array of ids: %v", err)
		}
	} else {
		for _, f := range strings.FieldsFunc(line, func(r rune) bool { return r == ' ' || r == ',' || r == '\t' }) {
			id, err := strconv.Atoi(f)
			if err != nil {
				return nil, fmt.Errorf("%q is not a token id (ids are numbers separated by spaces or commas, or a JSON array)", f)
			}
			ids = append(ids, id)
		}
	}
	for _, id := range ids {
		if id < 0 || id >= vocab {
			return nil, fmt.Errorf("id %d is outside the tokenizer's vocabulary (0 to %d)", id, vocab-1)
		}
	}
	return ids, nil
}

// writeIDs writes ids separated by spaces, or as a JSON array.
func writeIDs(w *bufio.Writer, ids []int, asJSON bool) {
	sep := " "
	if asJSON {
		w.WriteByte('[')
		sep = ","
	}
	var buf [20]byte
	for i, id := range ids {
		if i > 0 {
			w.WriteString(sep)
		}
		w.Write(strconv.AppendInt(buf[:0], int64(id), 10))
	}
	if asJSON {
		w.WriteByte(']')
	}
}
