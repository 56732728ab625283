package aguiapi

import (
	"mime"
	"net/http"
	"strconv"
	"strings"

	"github.com/threadline/threadline/agui/aguiproto"
	"github.com/threadline/threadline/server/httpjson"
)

// binding is the wire an AG-UI stream is written in.
type binding int

const (
	// bindingSSE is `data: <json>` Server-Sent Events.
	bindingSSE binding = iota
	// bindingProtobuf is @ag-ui/proto's length-prefixed messages.
	bindingProtobuf
)

// negotiate picks the binding a request's Accept header asks for:
//
//   - protobuf when it names application/vnd.ag-ui.event+proto itself;
//   - else SSE when it admits text/event-stream (by name, text/* or */*;
//     a missing header admits anything);
//   - else protobuf when a wildcard admits it (application/*);
//   - else neither: ok is false.
//
// So `*/*`, which curl and browsers send expecting SSE, keeps SSE, where
// the official encoder (@ag-ui/encoder 1.0.0) would answer it with
// protobuf, the first type its matcher finds admitted. q-values do not
// rank the two: naming the protobuf type is asking for it, whatever
// weight text/event-stream has beside it. A q of 0 still refuses the type
// it is on, as RFC 9110 has it and the official matcher does too.
// protobufOK false (a surface that serves SSE only) takes the SSE rule
// alone.
func negotiate(header []string, protobufOK bool) (b binding, ok bool) {
	if len(header) == 0 {
		return bindingSSE, true
	}
	var namesProto, admitsSSE, admitsProto bool
	for _, h := range header {
		for _, part := range strings.Split(h, ",") {
			part = strings.TrimSpace(part)
			if part == "" {
				continue
			}
			mt, params, err := mime.ParseMediaType(part)
			if err != nil {
				continue
			}
			if q, ok := params["q"]; ok {
				if v, err := strconv.ParseFloat(q, 64); err != nil || v <= 0 {
					continue
				}
			}
			switch mt {
			case aguiproto.MediaType:
				namesProto = true
			case "text/event-stream", "text/*":
				admitsSSE = true
			case "*/*":
				admitsSSE, admitsProto = true, true
			case "application/*":
				admitsProto = true
			}
		}
	}
	switch {
	case protobufOK && namesProto:
		return bindingProtobuf, true
	case admitsSSE:
		return bindingSSE, true
	case protobufOK && admitsProto:
		return bindingProtobuf, true
	}
	return bindingSSE, false
}

// notAcceptable is the 406 for an Accept header that admits no binding
// the endpoint serves.
func notAcceptable(r *http.Request, protobufOK bool) error {
	if !protobufOK {
		return httpjson.NewError(http.StatusNotAcceptable, "not_acceptable", "Accept",
			"this endpoint streams text/event-stream; the Accept header %q does not admit it", r.Header.Get("Accept"))
	}
	return httpjson.NewError(http.StatusNotAcceptable, "not_acceptable", "Accept",
		"this endpoint streams text/event-stream or %s; the Accept header %q admits neither", aguiproto.MediaType, r.Header.Get("Accept"))
}
