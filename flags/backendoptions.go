package flags

import (
	"fmt"
	"strings"
)

// backendExtraOptions is the flag whose value carries options of its own: key[=value] items,
// separated by commas, that XLA merges into a map and reads when it compiles.
const backendExtraOptions = "xla_backend_extra_options"

// backendOptionsProblem returns why XLA would end the process on value for
// --xla_backend_extra_options, or "". XLA keeps the items whose key starts with xla_ for itself
// (its backends look up the keys they know and ignore the others) and hands every other item to
// LLVM's command-line parser when it first compiles a program; LLVM ends the process on an option
// it does not know ("Unknown command line argument"), the empty one included. Which options an
// LLVM has depends on its version and targets, which onegpu cannot see, so only xla_ keys pass.
func backendOptionsProblem(value string) string {
	for _, item := range strings.Split(value, ",") {
		key, _, _ := strings.Cut(item, "=")
		switch {
		case key == "":
			return fmt.Sprintf("%q has an item without a key, which XLA hands to LLVM's option parser when it compiles: "+
				"LLVM ends the process (\"Unknown command line argument ''\")", value)
		case !strings.HasPrefix(key, "xla_"):
			return fmt.Sprintf("item %q: XLA hands keys that do not start with xla_ to LLVM's option parser when it compiles, "+
				"and LLVM ends the process on an option it does not know (\"Unknown command line argument '%s'\"); "+
				"onegpu cannot tell which options the plugin's LLVM has, so it accepts only xla_ keys", item, item)
		}
	}
	return ""
}
