package tokenizer

import (
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

var benchFile = flag.String("tokenizer.text", "", "a text file BenchmarkEncode also encodes, line by line (make_fixture.py bench times Go's Isaac.Newton-Opticks.txt)")

// BenchmarkEncode: Encode's throughput over every case of the corpus (and -tokenizer.text's
// lines), in the bytes of text per second of wall and of CPU time, with the word cache warm, as
// make_fixture.py bench times the Rust library. Run on one core (-cpu 1) to compare:
//
//	go test ./tokenizer -run - -bench Encode -cpu 1 -tokenizer.text $(go env GOROOT)/src/testdata/Isaac.Newton-Opticks.txt
func BenchmarkEncode(b *testing.B) {
	inputs := map[string][]string{"corpus": referenceCases(b)}
	if *benchFile != "" {
		data, err := os.ReadFile(*benchFile)
		if err != nil {
			b.Fatal(err)
		}
		inputs[filepath.Base(*benchFile)] = strings.Split(string(data), "\n")
	}
	for _, variant := range variants {
		tok, err := Load(filepath.Join("testdata", variant))
		if err != nil {
			b.Fatal(err)
		}
		for name, texts := range inputs {
			b.Run(variant+"/"+name, func(b *testing.B) {
				size := 0
				for _, t := range texts {
					size += len(t)
					tok.Encode(t, false)
				}
				b.SetBytes(int64(size))
				b.ResetTimer()
				cpu0, ok := cpuTime()
				for i := 0; i < b.N; i++ {
					for _, t := range texts {
						tok.Encode(t, false)
					}
				}
				// On a busy machine the CPU time is the steadier measure (make_fixture.py bench
				// compares it with the Rust library's).
				if cpu1, _ := cpuTime(); ok && cpu1 > cpu0 {
					b.ReportMetric(float64(size)*float64(b.N)/(cpu1-cpu0).Seconds()/1e6, "cpu-MB/s")
				}
			})
		}
	}
}

// BenchmarkDecode: Decode's throughput over the corpus' ids, in bytes of text per second.
func BenchmarkDecode(b *testing.B) {
	cases := referenceCases(b)
	for _, variant := range variants {
		tok, err := Load(filepath.Join("testdata", variant))
		if err != nil {
			b.Fatal(err)
		}
		ids := make([][]int, len(cases))
		size := 0
		for i, c := range cases {
			ids[i] = tok.Encode(c, false)
			size += len(c)
		}
		b.Run(variant, func(b *testing.B) {
			b.SetBytes(int64(size))
			for i := 0; i < b.N; i++ {
				for _, x := range ids {
					tok.Decode(x, false)
				}
			}
		})
	}
}
