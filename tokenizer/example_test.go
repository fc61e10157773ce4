package tokenizer_test

import (
	"fmt"

	"github.com/onegpu/onegpu/tokenizer"
)

// Encode and decode with the Llama 3 style fixture (a folder with tokenizer.json,
// tokenizer_config.json and generation_config.json, as Hugging Face ships them).
func Example() {
	tok, err := tokenizer.Load("testdata/llama3")
	if err != nil {
		panic(err)
	}
	ids := tok.Encode("Hello, world!<|eot_id|>", true)
	first, _ := tok.Token(ids[0])
	bos, _ := tok.BOS()
	fmt.Println(first, ids[0] == bos)
	fmt.Printf("%q\n", tok.Decode(ids, false))
	fmt.Printf("%q\n", tok.Decode(ids, true))
	fmt.Println(tok.EOSTokens(), tok.VocabSize())
	// Output:
	// <|begin_of_text|> true
	// "<|begin_of_text|>Hello, world!<|eot_id|>"
	// "Hello, world!"
	// [1001 1008 1009] 1024
}
