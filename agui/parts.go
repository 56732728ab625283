package agui

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"

	"github.com/threadline/threadline/instanceai"
)

// Content part types (@ag-ui/core 1.0.0 ContentPart).
const (
	PartText     = "text"
	PartImage    = "image"
	PartAudio    = "audio"
	PartVideo    = "video"
	PartDocument = "document"
)

// Part source types (@ag-ui/core 1.0.0 PartSource).
const (
	SourceData = "data" // value is base64, mimeType required
	SourceURL  = "url"  // value is a URL, mimeType optional
	SourceFile = "file" // value is a provider's file handle, provider and mimeType optional
)

// ContentPart is one part of a user message's content: a text part or a
// media part (image, audio, video, document) with its source.
type ContentPart struct {
	Type     string          `json:"type"`
	ID       string          `json:"id,omitempty"`
	Text     *string         `json:"text,omitempty"`
	Source   *PartSource     `json:"source,omitempty"`
	Metadata json.RawMessage `json:"metadata,omitempty"`
}

// PartSource is where a media part's bytes come from.
type PartSource struct {
	Type     string `json:"type"`
	Value    string `json:"value"`
	MimeType string `json:"mimeType,omitempty"`
	Provider string `json:"provider,omitempty"`
}

// TextPart is a text content part.
func TextPart(s string) ContentPart { return ContentPart{Type: PartText, Text: &s} }

// AttachmentPart is the content part of a stored attachment: its kind as
// the part's type, its bytes, URL or file id as the source, and its file
// name as metadata.filename.
func AttachmentPart(a instanceai.Attachment) ContentPart {
	p := ContentPart{Type: a.EffectiveKind(), Source: &PartSource{Type: SourceData, Value: a.Data, MimeType: a.MimeType}}
	switch {
	case a.URL != "":
		p.Source = &PartSource{Type: SourceURL, Value: a.URL, MimeType: a.MimeType}
	case a.FileID != "":
		p.Source = &PartSource{Type: SourceFile, Value: a.FileID, MimeType: a.MimeType, Provider: a.Provider}
	}
	if a.FileName != "" {
		p.Metadata, _ = json.Marshal(map[string]string{"filename": a.FileName})
	}
	return p
}

// PartsContent is the JSON content of a user message of text and
// attachments: the text alone as a string when there are no attachments
// (as every message was before they were kept), else a text part (when
// there is text) followed by a part per attachment.
func PartsContent(text string, atts []instanceai.Attachment) json.RawMessage {
	if len(atts) == 0 {
		return TextContent(text)
	}
	parts := make([]ContentPart, 0, len(atts)+1)
	if text != "" {
		parts = append(parts, TextPart(text))
	}
	for _, a := range atts {
		parts = append(parts, AttachmentPart(a))
	}
	b, _ := json.Marshal(parts)
	return b
}

// Attachments returns the media parts of a user message as attachments
// (nil for string content or text parts alone). It assumes a message
// Validate accepted.
func (m Message) Attachments() []instanceai.Attachment {
	atts, _ := m.parseParts()
	return atts
}

// parseParts decodes and checks the content parts of a user message: every
// part is a known type with its required fields, every inline source is
// base64 of a MIME type, sizes are within n8n Instance AI's limits
// (instanceai.MaxAttachmentBytes per part, MaxMessageAttachmentBytes in
// all), and every media part has a form in Chat Completions (see
// instanceai.CheckDeliverable). Fields are named relative to the message
// ("content[2].source.mimeType").
func (m Message) parseParts() ([]instanceai.Attachment, *FieldError) {
	if firstByte(m.Content) != '[' {
		return nil, nil
	}
	var raw []json.RawMessage
	if err := json.Unmarshal(m.Content, &raw); err != nil {
		return nil, &FieldError{Field: "content", Reason: err.Error()}
	}
	var atts []instanceai.Attachment
	total := 0
	for i, r := range raw {
		at := func(field string) string {
			if field == "" {
				return fmt.Sprintf("content[%d]", i)
			}
			return fmt.Sprintf("content[%d].%s", i, field)
		}
		bad := func(field, format string, args ...any) *FieldError {
			return &FieldError{Field: at(field), Reason: fmt.Sprintf(format, args...)}
		}
		if firstByte(r) != '{' {
			return nil, bad("", "must be a content part object")
		}
		var p ContentPart
		if err := json.Unmarshal(r, &p); err != nil {
			field := ""
			if te := (*json.UnmarshalTypeError)(nil); errors.As(err, &te) {
				field = te.Field
			}
			return nil, bad(field, "%s", reason(err))
		}
		switch p.Type {
		case PartText:
			if p.Text == nil {
				return nil, bad("text", "is required (a string) on a text part")
			}
			continue
		case PartImage, PartAudio, PartVideo, PartDocument:
		case "":
			return nil, bad("type", "is required")
		default:
			return nil, bad("type", "%q is not one of text, image, audio, video, document", p.Type)
		}
		if len(atts) == instanceai.MaxAttachments {
			return nil, bad("", "a message carries at most %d image, audio, video or document parts", instanceai.MaxAttachments)
		}
		s := p.Source
		if s == nil {
			return nil, bad("source", "is required on a %s part", p.Type)
		}
		if s.Value == "" {
			return nil, bad("source.value", "is required")
		}
		a := instanceai.Attachment{Type: instanceai.AttachmentFile, Kind: p.Type, MimeType: s.MimeType, FileName: partFileName(p.Metadata)}
		// size counts a part's bytes against the limits.
		size := func(n int) *FieldError {
			if n > instanceai.MaxAttachmentBytes {
				return &FieldError{Field: at("source.value"), Status: http.StatusRequestEntityTooLarge,
					Reason: fmt.Sprintf("decodes to %d bytes; a part may hold at most %d (7.5 MiB)", n, instanceai.MaxAttachmentBytes)}
			}
			if total += n; total > instanceai.MaxMessageAttachmentBytes {
				return &FieldError{Field: at("source.value"), Status: http.StatusRequestEntityTooLarge,
					Reason: fmt.Sprintf("brings the message's parts to %d bytes; a message may hold at most %d (12 MiB)", total, instanceai.MaxMessageAttachmentBytes)}
			}
			return nil
		}
		switch s.Type {
		case SourceData:
			if err := instanceai.CheckMimeType(s.MimeType); err != nil {
				return nil, bad("source.mimeType", "%v", err)
			}
			n, err := instanceai.DecodedLen(s.Value)
			if err != nil {
				return nil, bad("source.value", "%v", err)
			}
			if fe := size(n); fe != nil {
				return nil, fe
			}
			a.Data = s.Value
		case SourceURL, SourceFile:
			if s.Type == SourceURL && len(s.Value) > 5 && strings.EqualFold(s.Value[:5], "data:") {
				// A data: URL carries its bytes as inline data does: it
				// counts against the same limits (3 bytes per 4 of base64).
				_, payload, _ := strings.Cut(s.Value, ",")
				if fe := size(len(payload) / 4 * 3); fe != nil {
					return nil, fe
				}
			}
			if s.MimeType != "" {
				if err := instanceai.CheckMimeType(s.MimeType); err != nil {
					return nil, bad("source.mimeType", "%v", err)
				}
			}
			if s.Type == SourceURL {
				a.URL = s.Value
			} else {
				a.FileID, a.Provider = s.Value, s.Provider
			}
		case "":
			return nil, bad("source.type", "is required")
		default:
			return nil, bad("source.type", "%q is not one of data, url, file", s.Type)
		}
		if err := instanceai.CheckDeliverable(a); err != nil {
			field := map[string]string{"mimeType": "source.mimeType", "url": "source.value", "kind": "type"}[err.Field]
			return nil, bad(field, "%s", err.Reason)
		}
		atts = append(atts, a)
	}
	return atts, nil
}

// partFileName reads a media part's file name from its metadata
// (filename, fileName or name): AG-UI's parts have no field of their own
// for it, and Chat Completions' file part wants one.
func partFileName(meta json.RawMessage) string {
	var m map[string]any
	if json.Unmarshal(meta, &m) != nil {
		return ""
	}
	for _, k := range []string{"filename", "fileName", "name"} {
		if s, ok := m[k].(string); ok && strings.TrimSpace(s) != "" {
			return s
		}
	}
	return ""
}
