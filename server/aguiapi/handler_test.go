package aguiapi

import (
	"testing"
)

func TestAcceptsEventStream(t *testing.T) {
	cases := []struct {
		header []string
		want   bool
	}{
		{nil, true},
		{[]string{"text/event-stream"}, true},
		{[]string{"*/*"}, true},
		{[]string{"text/*"}, true},
		{[]string{"application/json, text/event-stream;q=0.2"}, true},
		{[]string{"application/json", "text/event-stream"}, true},
		{[]string{"TEXT/EVENT-STREAM"}, true},
		{[]string{"application/json"}, false},
		{[]string{"text/html"}, false},
		{[]string{"text/event-stream;q=0"}, false},
		{[]string{"*/*;q=0, application/json"}, false},
		{[]string{"application/vnd.ag-ui.event+proto"}, false},
	}
	for _, c := range cases {
		if got := acceptsEventStream(c.header); got != c.want {
			t.Errorf("Accept %q: got %v, want %v", c.header, got, c.want)
		}
	}
}
