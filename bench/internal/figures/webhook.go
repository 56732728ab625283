package figures

import (
	"bufio"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"time"
)

// Webhook stands in for an n8n streaming webhook (the NDJSON chunks of
// agent/n8n), so that a real Threadline run (--agent n8n) carries text
// the load client wrote, with a send timestamp in it:
//
//	POST /latency/RATE/MILLIS  one item, "ts=<unix ns>;" chunks at RATE/s for MILLIS ms
//	POST /seed/N               N chunks as fast as possible, alternating two
//	                           items, so that each chunk closes the other
//	                           item's text segment and is stored as its own
//	                           text-block: a thread of about N stored events
type Webhook struct {
	URL string
	srv *http.Server
}

// StartWebhook listens on a free loopback port.
func StartWebhook() (*Webhook, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /latency/{rate}/{millis}", serveLatency)
	mux.HandleFunc("POST /seed/{n}", serveSeed)
	w := &Webhook{URL: "http://" + l.Addr().String(), srv: &http.Server{Handler: mux}}
	go w.srv.Serve(l)
	return w, nil
}

// Close stops the webhook server.
func (w *Webhook) Close() { w.srv.Close() }

func chunk(typ string, item int, content string) string {
	c := ""
	if typ == "item" {
		c = fmt.Sprintf(`"content":%q,`, content)
	}
	return fmt.Sprintf(`{"type":%q,%s"metadata":{"nodeId":"agent-1","nodeName":"AI Agent","runIndex":0,"itemIndex":%d,"timestamp":%d}}`+"\n",
		typ, c, item, time.Now().UnixMilli())
}

func serveLatency(w http.ResponseWriter, r *http.Request) {
	rate, _ := strconv.Atoi(r.PathValue("rate"))
	millis, _ := strconv.Atoi(r.PathValue("millis"))
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	flush := w.(http.Flusher).Flush
	fmt.Fprint(w, chunk("begin", 0, ""))
	flush()
	total := rate * millis / 1000
	pace(rate, total, func(int) {
		fmt.Fprint(w, chunk("item", 0, fmt.Sprintf("ts=%d; ", time.Now().UnixNano())))
		flush()
	})
	fmt.Fprint(w, chunk("end", 0, ""))
}

func serveSeed(w http.ResponseWriter, r *http.Request) {
	n, _ := strconv.Atoi(r.PathValue("n"))
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	bw := bufio.NewWriterSize(w, 64<<10)
	bw.WriteString(chunk("begin", 0, ""))
	bw.WriteString(chunk("begin", 1, ""))
	for i := 0; i < n; i++ {
		bw.WriteString(chunk("item", i%2, fmt.Sprintf("chunk %d. ", i)))
	}
	bw.WriteString(chunk("end", 0, ""))
	bw.WriteString(chunk("end", 1, ""))
	bw.Flush()
}

// pace calls send total times at rate per second on a fixed schedule
// (send i is due at start + i/rate), so a slow send is caught up rather
// than stretching the run.
func pace(rate, total int, send func(i int)) {
	start := time.Now()
	interval := time.Second / time.Duration(rate)
	for i := 0; i < total; i++ {
		if d := time.Until(start.Add(time.Duration(i) * interval)); d > 0 {
			time.Sleep(d)
		}
		send(i)
	}
}
