package layers

import (
	"fmt"

	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/ml/context"
)

// SwiGLU is Llama's MLP: down(silu(gate(x)) · up(x)), three Linear layers without biases in
// scopes "gate_proj" and "up_proj" (weights [intermediate, width]) and "down_proj" ([width,
// intermediate]), in the policy's compute dtype. The output has x's width.
func SwiGLU(ctx *context.Context, x *graph.Node, intermediate int) *graph.Node {
	if x.Rank() < 1 || intermediate < 1 {
		panic(fmt.Sprintf("layers.SwiGLU: cannot expand %s to an intermediate width of %d", x.Shape(), intermediate))
	}
	var linear Linear // without biases
	gate := SiLU(linear.Apply(ctx.In("gate_proj"), x, intermediate))
	up := linear.Apply(ctx.In("up_proj"), x, intermediate)
	return Note(ctx, "SwiGLU", linear.Apply(ctx.In("down_proj"), graph.Mul(gate, up), x.Shape().Dim(-1)))
}
