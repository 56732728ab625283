// Command joeserver is the peer a Go developer would write instead of
// Threadline for live fan-out: go-sse's Server with its default provider,
// Joe, one topic, a publish endpoint and an SSE endpoint. It keeps nothing:
// Joe has no replay unless a Replayer is configured, and none is here.
//
//	POST /publish   the request body becomes one message's data
//	GET  /events    the SSE stream
package main

import (
	"bytes"
	"flag"
	"io"
	"log"
	"net/http"

	sse "github.com/tmaxmax/go-sse"
)

func main() {
	addr := flag.String("addr", "127.0.0.1:8090", "listen address")
	flag.Parse()

	server := &sse.Server{
		Provider: &sse.Joe{},
		// go-sse sends the response headers with the first message, so an
		// EventSource on a quiet topic would not even see the stream open.
		// Flushing them at once is what a user has to add.
		OnSession: func(w http.ResponseWriter, r *http.Request) ([]string, bool) {
			w.Header().Set("Content-Type", "text/event-stream")
			w.WriteHeader(http.StatusOK)
			// w is go-sse's wrapper, whose Flush returns an error, so it is
			// no http.Flusher; the ResponseController finds its FlushError.
			if err := http.NewResponseController(w).Flush(); err != nil {
				return nil, false
			}
			return []string{sse.DefaultTopic}, true
		},
	}

	mux := http.NewServeMux()
	mux.Handle("GET /events", server)
	mux.HandleFunc("POST /publish", func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(io.LimitReader(r.Body, 1<<20))
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		msg := &sse.Message{}
		// One data line per line of the body, as SSE requires.
		for _, line := range bytes.Split(bytes.TrimRight(body, "\n"), []byte("\n")) {
			msg.AppendData(string(line))
		}
		if err := server.Publish(msg); err != nil {
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
			return
		}
		w.WriteHeader(http.StatusNoContent)
	})
	log.Fatal(http.ListenAndServe(*addr, mux))
}
