package main

import (
	"flag"
	"fmt"
	"io"
	"os"
	"strconv"
	"time"
)

// envFlags defines flags whose defaults come from environment variables, and
// names the variable in each flag's help.
type envFlags struct {
	fs *flag.FlagSet
	// bad collects environment values that do not parse, reported at Parse.
	bad []error
}

func newEnvFlags(name, synopsis string, out io.Writer) *envFlags {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(out)
	fs.Usage = func() {
		fmt.Fprintf(out, "Usage: threadline %s [flags]\n\n%s\n\nFlags:\n", name, synopsis)
		fs.PrintDefaults()
	}
	return &envFlags{fs: fs}
}

func (e *envFlags) help(usage, env string) string {
	return fmt.Sprintf("%s (env %s)", usage, env)
}

func (e *envFlags) String(p *string, name, env, def, usage string) {
	if v, ok := os.LookupEnv(env); ok {
		def = v
	}
	e.fs.StringVar(p, name, def, e.help(usage, env))
}

func (e *envFlags) Duration(p *time.Duration, name, env string, def time.Duration, usage string) {
	if v, ok := os.LookupEnv(env); ok {
		d, err := time.ParseDuration(v)
		if err != nil {
			e.bad = append(e.bad, fmt.Errorf("%s=%q: not a duration such as 20ms or 1s", env, v))
		} else {
			def = d
		}
	}
	e.fs.DurationVar(p, name, def, e.help(usage, env))
}

func (e *envFlags) Int64(p *int64, name, env string, def int64, usage string) {
	if v, ok := os.LookupEnv(env); ok {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			e.bad = append(e.bad, fmt.Errorf("%s=%q: not an integer", env, v))
		} else {
			def = n
		}
	}
	e.fs.Int64Var(p, name, def, e.help(usage, env))
}

func (e *envFlags) Int(p *int, name, env string, def int, usage string) {
	if v, ok := os.LookupEnv(env); ok {
		n, err := strconv.Atoi(v)
		if err != nil {
			e.bad = append(e.bad, fmt.Errorf("%s=%q: not an integer", env, v))
		} else {
			def = n
		}
	}
	e.fs.IntVar(p, name, def, e.help(usage, env))
}

// Parse parses args; environment errors are reported like flag errors.
func (e *envFlags) Parse(args []string) error {
	if err := e.fs.Parse(args); err != nil {
		return err
	}
	if len(e.bad) > 0 {
		return usageError{e.bad[0].Error()}
	}
	if e.fs.NArg() > 0 {
		return usageError{fmt.Sprintf("unexpected argument %q", e.fs.Arg(0))}
	}
	return nil
}
