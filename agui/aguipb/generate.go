// Package aguipb holds the Go types of AG-UI's protobuf binding, generated from
// the @ag-ui/proto 1.0.0 schema kept in proto/ (see proto/ORIGIN.md for where
// those files come from and how they were checked), and of Threadline's one
// addition to it, the frame cursor (proto/threadline_cursor.proto).
//
// The generated files are committed so that building and testing need no
// protoc; `make aguipb` (or `go generate ./agui/aguipb`) regenerates them with
// protoc and protoc-gen-go v1.36.12.
package aguipb

//go:generate protoc -I proto --go_out=. --go_opt=paths=source_relative --go_opt=Mevents.proto=github.com/threadline/threadline/agui/aguipb --go_opt=Mtypes.proto=github.com/threadline/threadline/agui/aguipb --go_opt=Mpatch.proto=github.com/threadline/threadline/agui/aguipb --go_opt=Mthreadline_cursor.proto=github.com/threadline/threadline/agui/aguipb events.proto types.proto patch.proto threadline_cursor.proto
