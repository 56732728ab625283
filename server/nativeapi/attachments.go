package nativeapi

import (
	"encoding/json"
	"fmt"
	"net/http"

	"github.com/threadline/threadline/instanceai"
	"github.com/threadline/threadline/server/httpjson"
)

// chatAttachments checks a chat's attachments as n8n's
// instanceAiAttachmentSchema does for its file attachments (@n8n/api-types
// 1.41.0: {type: "file", data: base64, mimeType ≤ 100, fileName ≤ 300},
// at most 10), with n8n's size limits on the decoded bytes, and refuses
// what an LLM agent could not hand its model (see
// instanceai.CheckDeliverable). n8n's other attachment types (workflow,
// agent, nodes) name n8n resources Threadline does not have: refused,
// rather than stored and ignored. Every error names its field
// (attachments[1].mimeType) and comes before anything is stored.
func chatAttachments(raw []json.RawMessage) ([]instanceai.Attachment, error) {
	if len(raw) > instanceai.MaxAttachments {
		return nil, httpjson.NewError(http.StatusBadRequest, "invalid_field", "attachments",
			"attachments holds %d files; a message may carry at most %d", len(raw), instanceai.MaxAttachments)
	}
	var out []instanceai.Attachment
	total := 0
	for i, r := range raw {
		at := func(field string) string {
			if field == "" {
				return fmt.Sprintf("attachments[%d]", i)
			}
			return fmt.Sprintf("attachments[%d].%s", i, field)
		}
		bad := func(field, format string, args ...any) error {
			return httpjson.NewError(http.StatusBadRequest, "invalid_field", at(field), "%s %s", at(field), fmt.Sprintf(format, args...))
		}
		var w struct {
			Type     *string `json:"type"`
			Data     *string `json:"data"`
			MimeType *string `json:"mimeType"`
			FileName *string `json:"fileName"`
		}
		if len(r) == 0 || r[0] != '{' || json.Unmarshal(r, &w) != nil {
			return nil, bad("", "must be an object {type: \"file\", data, mimeType, fileName} with string fields")
		}
		switch {
		case w.Type == nil:
			return nil, bad("type", "is required")
		case *w.Type == "workflow" || *w.Type == "agent" || *w.Type == "nodes":
			return nil, bad("type", "%q attachments name n8n resources this server does not have; only \"file\" attachments are taken", *w.Type)
		case *w.Type != instanceai.AttachmentFile:
			return nil, bad("type", "must be \"file\", got %q", *w.Type)
		case w.Data == nil || *w.Data == "":
			return nil, bad("data", "is required (the file's bytes, base64)")
		case w.MimeType == nil:
			return nil, bad("mimeType", "is required")
		case w.FileName == nil:
			return nil, bad("fileName", "is required")
		case len(*w.FileName) > instanceai.MaxFileNameLen:
			return nil, bad("fileName", "must be at most %d characters", instanceai.MaxFileNameLen)
		}
		if err := instanceai.CheckMimeType(*w.MimeType); err != nil {
			return nil, bad("mimeType", "%v", err)
		}
		n, err := instanceai.DecodedLen(*w.Data)
		if err != nil {
			return nil, bad("data", "%v", err)
		}
		if n > instanceai.MaxAttachmentBytes {
			return nil, httpjson.NewError(http.StatusRequestEntityTooLarge, "too_large", at("data"),
				"%s decodes to %d bytes; a file may hold at most %d (7.5 MiB, n8n's limit)", at("data"), n, instanceai.MaxAttachmentBytes)
		}
		if total += n; total > instanceai.MaxMessageAttachmentBytes {
			return nil, httpjson.NewError(http.StatusRequestEntityTooLarge, "too_large", at("data"),
				"%s brings the message's files to %d bytes; a message may hold at most %d (12 MiB, n8n's limit)", at("data"), total, instanceai.MaxMessageAttachmentBytes)
		}
		a := instanceai.Attachment{Type: instanceai.AttachmentFile, Data: *w.Data, MimeType: *w.MimeType, FileName: *w.FileName}
		if e := instanceai.CheckDeliverable(a); e != nil {
			return nil, bad(e.Field, "%s", e.Reason)
		}
		out = append(out, a)
	}
	return out, nil
}
