// Package infer generates text with a language model: a KV cache (the prompt read in one pass,
// then one token a step, by programs compiled once per shape bucket), greedy decoding or sampling
// (temperature, top-k, top-p, a seed), stop tokens, and the text streamed as it is produced.
//
// GoMLX v0.26 has no While loop and its embedded backend no DynamicUpdateSlice, so a step cannot
// grow or update a cache in place: each layer's cache (layers.KVCache) has a fixed length, a
// power of two at least the generation's, and a step writes its tokens' keys and values with a
// gather and a select and lets each query read the entries up to its own position, which is the
// same program on the embedded backend and on XLA.
//
//	p, err := hf.Open(context.New(), "Llama-3.2-1B", dtypes.Float32, 0)
//	tok, err := tokenizer.Load("Llama-3.2-1B")
//	g, err := infer.New(backend, p.Model.(train.Model), p.Ctx, train.Settings{Policy: mixed.Float32})
//	defer g.Close()
//	prompt := infer.IDs(tok.Encode("The capital of France is", true))
//	stream := infer.NewTextStream(os.Stdout, tok, prompt)
//	r, err := g.Generate(prompt, infer.Options{MaxNewTokens: 32, StopTokens: infer.IDs(tok.EOSTokens()), OnToken: stream.Add})
//	stream.Flush()
//	fmt.Printf("\n%.1f tokens/s\n", r.TokensPerSecond())
//
// A checkpoint onegpu wrote generates the same way: l, err := train.Load(dir), then
// infer.New(l.Backend, l.Model, l.Ctx, l.Settings()).
package infer
