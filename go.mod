module github.com/onegpu/onegpu

go 1.26

require (
	github.com/gomlx/gomlx v0.26.0 // indirect
	github.com/janpfeifer/must v0.2.0 // indirect
)
