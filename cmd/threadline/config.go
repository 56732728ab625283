package main

import (
	"errors"
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
	// secrets are applied from the environment at Parse, not as defaults.
	secrets []secretFlag
}

type secretFlag struct {
	p         *string
	name, env string
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

func (e *envFlags) Bool(p *bool, name, env string, def bool, usage string) {
	if v, ok := os.LookupEnv(env); ok {
		b, err := strconv.ParseBool(v)
		if err != nil {
			e.bad = append(e.bad, fmt.Errorf("%s=%q: not a boolean such as true or false", env, v))
		} else {
			def = b
		}
	}
	e.fs.BoolVar(p, name, def, e.help(usage, env))
}

// Secret defines a string flag whose environment value is not made its
// default: the help prints defaults, and must not print a secret.
func (e *envFlags) Secret(p *string, name, env, usage string) {
	e.fs.StringVar(p, name, "", e.help(usage, env))
	e.secrets = append(e.secrets, secretFlag{p: p, name: name, env: env})
}

// Parse parses args; environment errors are reported like flag errors.
func (e *envFlags) Parse(args []string) error {
	if err := e.fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		// An unknown flag or a bad value: exit status 2, as for every
		// other usage error (the flag package has printed the usage).
		return usageError{err.Error()}
	}
	set := map[string]bool{}
	e.fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	for _, s := range e.secrets {
		if v, ok := os.LookupEnv(s.env); ok && !set[s.name] {
			*s.p = v
		}
	}
	if len(e.bad) > 0 {
		return usageError{e.bad[0].Error()}
	}
	if e.fs.NArg() > 0 {
		return usageError{fmt.Sprintf("unexpected argument %q", e.fs.Arg(0))}
	}
	return nil
}
