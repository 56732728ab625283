package sse

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

func TestScanFieldsAndLongLines(t *testing.T) {
	long := strings.Repeat("x", 100<<10)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		fmt.Fprintf(w, ": connected\n\nid: 7\nevent: e\ndata: {\"ts\":123}\n\ndata:%s\r\n\n", long)
	}))
	defer srv.Close()
	s, err := Open(srv.URL+"/x", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	var got []string
	err = s.Scan(func(f Field, v []byte) bool {
		if f == Data && len(v) > 100 {
			got = append(got, fmt.Sprintf("%d:len%d", f, len(v)))
		} else {
			got = append(got, fmt.Sprintf("%d:%s", f, v))
		}
		return true
	})
	if err == nil {
		t.Fatal("want the end of the stream as an error")
	}
	want := []string{"3:connected", "4:", "0:7", "2:e", `1:{"ts":123}`, "4:", fmt.Sprintf("1:len%d", len(long)), "4:"}
	if strings.Join(got, "|") != strings.Join(want, "|") {
		t.Fatalf("got %q\nwant %q", got, want)
	}
	if s.FirstByte <= 0 {
		t.Fatal("no first-byte time")
	}
	// The response head and the chunked body's framing come on top.
	if body := len(": connected\n\nid: 7\nevent: e\ndata: {\"ts\":123}\n\ndata:\r\n\n") + len(long); s.BytesRead() <= int64(body) {
		t.Fatalf("BytesRead %d, the body alone is %d", s.BytesRead(), body)
	}
}

func TestInt(t *testing.T) {
	if n, ok := Int([]byte(`{"text":"ts=1234;"}`), "ts="); !ok || n != 1234 {
		t.Fatalf("got %d %v", n, ok)
	}
	if _, ok := Int([]byte(`{"a":1}`), `"ts":`); ok {
		t.Fatal("absent key parsed")
	}
}
