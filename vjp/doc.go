// Package vjp replaces GoMLX v0.26.0 gradient rules (vector-Jacobian products) that are slow or
// inexact: matmul gradients built as broadcast-multiply-and-sum (tens of times slower and 16-40%
// wrong in bfloat16), broadcast gradients summed in 16 bits, and the missing rules for Rsqrt,
// Expm1, Identity, Clamp and a Slice the embedded backend can run. Importing it installs the rules
// (Install, at package initialization), for graphs on any backend, one GoMLX created included;
// UseStock restores GoMLX's for one graph, for comparison. SplitAxis splits an axis with
// jax.lax.split's gradient.
//
// Each rule is tested against finite differences and against GoMLX's own rule.
package vjp
