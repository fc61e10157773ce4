// Package panics is how onegpu's graph builders report misuse, the way GoMLX's do: Panicf panics
// with an error, and Catch, used where input from a user builds a graph, turns it back into one.
package panics
