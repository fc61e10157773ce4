package models_test

import (
	"fmt"

	"github.com/onegpu/onegpu/models"
)

// The tutorial's GPT has 155,877,376 parameters; a config that cannot work says which field.
func ExampleGPTConfig() {
	config, _ := models.Preset("tutorial")
	fmt.Println(config.Params(), config.Heads())
	config.HeadDim = 96
	fmt.Println(config.Validate())
	// Output:
	// 155877376 8
	// GPT config: HeadDim = 96 does not divide Hidden = 1024 into heads
}
