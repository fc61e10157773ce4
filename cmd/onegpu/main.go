// Command onegpu trains models that do not fit, or fit slowly, on one accelerator, and explains
// where their memory and time go.
//
// Usage:
//
//	onegpu <command> [flags]
//
// Run `onegpu help` for the list of commands; every command takes -h and --json.
package main

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"sort"
	"strings"
)

// command is one subcommand of onegpu. Each lives in its own file and registers itself in init.
type command struct {
	name    string
	summary string
	// run receives the arguments after the command name. It returns an *exitError to choose
	// the exit status without printing anything more.
	run func(args []string) error
}

var commands = map[string]command{}

func register(c command) {
	if _, dup := commands[c.name]; dup {
		panic("onegpu: command registered twice: " + c.name)
	}
	commands[c.name] = c
}

// exitError ends the program with the given status; its message (if any) was already printed.
type exitError struct{ code int }

func (e *exitError) Error() string { return fmt.Sprintf("exit status %d", e.code) }

func main() {
	os.Exit(runMain(os.Args[1:]))
}

func runMain(args []string) int {
	if len(args) == 0 || args[0] == "help" || args[0] == "-h" || args[0] == "--help" {
		usage(os.Stdout)
		return 0
	}
	c, ok := commands[args[0]]
	if !ok {
		fmt.Fprintf(os.Stderr, "onegpu: unknown command %q; the commands are: %s\n", args[0], strings.Join(commandNames(), ", "))
		return 2
	}
	err := c.run(args[1:])
	var exit *exitError
	switch {
	case err == nil:
		return 0
	case errors.Is(err, flag.ErrHelp):
		return 0
	case errors.As(err, &exit):
		return exit.code
	default:
		fmt.Fprintf(os.Stderr, "onegpu %s: %v\n", c.name, err)
		return 1
	}
}

func commandNames() []string {
	names := make([]string, 0, len(commands))
	for name := range commands {
		names = append(names, name)
	}
	sort.Strings(names)
	return names
}

func usage(w *os.File) {
	fmt.Fprintln(w, "onegpu: train models that do not fit, or fit slowly, on one accelerator.")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "Usage: onegpu <command> [flags]   (every command takes -h and --json)")
	fmt.Fprintln(w)
	for _, name := range commandNames() {
		fmt.Fprintf(w, "  %-8s %s\n", name, commands[name].summary)
	}
}

// newFlagSet returns a flag set for a subcommand whose usage line names the command.
func newFlagSet(name, synopsis string) *flag.FlagSet {
	fs := flag.NewFlagSet("onegpu "+name, flag.ContinueOnError)
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "Usage: onegpu %s %s\n\nFlags:\n", name, synopsis)
		fs.PrintDefaults()
	}
	if newFlagSetHook != nil {
		newFlagSetHook(fs)
	}
	return fs
}

// newFlagSetHook, when set (by tests), sees every flag set newFlagSet makes.
var newFlagSetHook func(*flag.FlagSet)
