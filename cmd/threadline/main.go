// Command threadline is the Threadline server: durable, replayable agent
// event streams served as n8n's Instance AI protocol.
//
//	threadline serve     run the server
//	threadline migrate   apply the storage schema and exit
//	threadline prune     delete the threads idle for longer than an age
//	threadline conformance   check an agent server against the protocol rules
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"github.com/threadline/threadline/internal/version"
	"io"
	"os"
	"os/signal"
	"syscall"
)

const usage = `Threadline streams what AI agents do to the interfaces that show them.

Usage:
  threadline <command> [flags]

Commands:
  serve     run the HTTP server (applies the schema first)
  migrate   apply the storage schema and exit
  prune     delete the threads idle for longer than --retention-idle, with
            their rows (--dry-run: only count them)
  conformance
            check an agent server (this one or any other) against the
            AG-UI and Instance AI protocol rules
  version   print the version of this build
  help      this text; 'threadline help <command>' for a command's flags

Run 'threadline <command> -h' for the flags of a command. Every flag can also
be set by the environment variable shown in its help; a flag on the command
line wins over the environment.
`

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Stdout, os.Stderr); err != nil {
		if !errors.Is(err, flag.ErrHelp) {
			fmt.Fprintln(os.Stderr, "threadline:", err)
		}
		os.Exit(exitCode(err))
	}
}

func exitCode(err error) int {
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	var u usageError
	if errors.As(err, &u) {
		return 2
	}
	return 1
}

type usageError struct{ msg string }

func (u usageError) Error() string { return u.msg }

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return usageError{"no command given"}
	}
	switch args[0] {
	case "serve":
		return serve(ctx, args[1:], stderr)
	case "migrate":
		return migrate(ctx, args[1:], stdout, stderr)
	case "prune":
		return prune(ctx, args[1:], stdout, stderr)
	case "conformance":
		return conformanceCmd(ctx, args[1:], stdout, stderr)
	case "version", "-version", "--version":
		fmt.Fprintln(stdout, "threadline", version.String())
		return nil
	case "-h", "-help", "--help", "help":
		if len(args) > 1 {
			return commandHelp(ctx, args[1], stdout)
		}
		fmt.Fprint(stdout, usage)
		return nil
	default:
		fmt.Fprint(stderr, usage)
		return usageError{fmt.Sprintf("unknown command %q", args[0])}
	}
}

// commandHelp prints a command's flags, as `threadline <command> -h` does,
// to stdout: asked for, help is the output, not a complaint.
func commandHelp(ctx context.Context, command string, stdout io.Writer) error {
	switch command {
	case "serve", "migrate", "prune", "conformance":
		if err := run(ctx, []string{command, "-h"}, stdout, stdout); !errors.Is(err, flag.ErrHelp) {
			return err
		}
		return nil
	case "version", "help":
		fmt.Fprint(stdout, usage)
		return nil
	}
	return usageError{fmt.Sprintf("help: unknown command %q; the commands are serve, migrate, prune, conformance, version and help", command)}
}
