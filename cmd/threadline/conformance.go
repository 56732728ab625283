package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/threadline/threadline/conformance/runner"
)

// errConformanceFailed is the exit status 1 of a suite run that found
// failures (the report says which).
var errConformanceFailed = errors.New("conformance: the target failed at least one rule")

func conformanceCmd(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	f := newEnvFlags("conformance",
		"Check an agent server against the AG-UI 1.0 and n8n Instance AI protocol rules: play the scenarios over HTTP,\n"+
			"check every stream, and print a verdict per rule. Exit status 1 when a rule fails.", stderr)
	var target, protocol, token, scenarios, junit string
	var asJSON, cleanup bool
	var heartbeat, timeout time.Duration
	f.String(&target, "target", "THREADLINE_CONFORMANCE_TARGET", "http://127.0.0.1:8080", "base URL of the server to check")
	f.String(&protocol, "protocol", "THREADLINE_CONFORMANCE_PROTOCOL", "all", "agui, native or all")
	f.Secret(&token, "token", "THREADLINE_CONFORMANCE_TOKEN", "bearer token sent on every request")
	f.String(&scenarios, "scenarios", "THREADLINE_CONFORMANCE_SCENARIOS", "",
		"comma-separated scenarios to play (default: every scenario the target supports): "+scenarioNames())
	f.Bool(&asJSON, "json", "THREADLINE_CONFORMANCE_JSON", false, "print the report as JSON instead of a table")
	f.String(&junit, "junit", "THREADLINE_CONFORMANCE_JUNIT", "", "also write the report as JUnit XML to this file")
	f.Duration(&heartbeat, "heartbeat", "THREADLINE_CONFORMANCE_HEARTBEAT", 0,
		"the target's heartbeat interval: when set, an idle stream is recorded for 3x as long and must carry heartbeats that often (Threadline: 15s)")
	f.Bool(&cleanup, "cleanup", "THREADLINE_CONFORMANCE_CLEANUP", false,
		"delete the threads the run created (conformance-<time>-…) when it is over")
	f.Duration(&timeout, "timeout", "THREADLINE_CONFORMANCE_TIMEOUT", 60*time.Second, "longest wait for one stream")
	if err := f.Parse(args); err != nil {
		return err
	}
	var protocols []string
	switch protocol {
	case "all":
		protocols = []string{runner.ProtocolAGUI, runner.ProtocolNative}
	case runner.ProtocolAGUI, runner.ProtocolNative:
		protocols = []string{protocol}
	default:
		return usageError{fmt.Sprintf("--protocol %q: want agui, native or all", protocol)}
	}
	var names []string
	for _, s := range strings.Split(scenarios, ",") {
		if s = strings.TrimSpace(s); s != "" {
			names = append(names, s)
		}
	}
	progress := stderr
	if !asJSON {
		progress = stdout
	}
	rep, err := runner.Run(ctx, runner.Config{Target: target, Protocols: protocols, Token: token, Scenarios: names,
		Heartbeat: heartbeat, Timeout: timeout, Progress: progress, Cleanup: cleanup})
	if err != nil {
		return err
	}
	if asJSON {
		err = rep.WriteJSON(stdout)
	} else {
		fmt.Fprintln(stdout)
		err = rep.WriteTable(stdout)
	}
	if err != nil {
		return err
	}
	if junit != "" {
		out, err := os.Create(junit)
		if err != nil {
			return fmt.Errorf("--junit: %w", err)
		}
		werr := rep.WriteJUnit(out)
		if err := out.Close(); werr == nil {
			werr = err
		}
		if werr != nil {
			return fmt.Errorf("--junit %s: %w", junit, werr)
		}
	}
	if !rep.Passed {
		return errConformanceFailed
	}
	return nil
}

func scenarioNames() string {
	var names []string
	for _, sc := range runner.Scenarios {
		names = append(names, sc.Name)
	}
	return strings.Join(names, ", ")
}
