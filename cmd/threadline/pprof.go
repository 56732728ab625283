package main

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"time"

	"github.com/threadline/threadline/server/auth"
)

// checkPprofAddr refuses a profiler address other machines could reach.
func checkPprofAddr(addr string) error {
	if addr == "" || auth.IsLoopback(addr) {
		return nil
	}
	return usageError{fmt.Sprintf("--pprof-addr %s: the profiler has no authentication; use a loopback address (127.0.0.1:6060)", addr)}
}

// startPprof serves Go's profiler (net/http/pprof) on its own listener, so
// that an operator can profile a live server (`go tool pprof
// http://ADDR/debug/pprof/profile`) without the API exposing it. The
// profiler has no authentication and shows the process's internals, so it
// binds only to a loopback address (checkPprofAddr). It returns the
// function that stops it.
func startPprof(addr string, logger *slog.Logger) (stop func(), err error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("--pprof-addr: listen on %s: %w", addr, err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() {
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			logger.Error("profiler stopped", "err", err)
		}
	}()
	logger.Info("profiler listening", "addr", ln.Addr().String())
	return func() { srv.Close() }, nil
}
