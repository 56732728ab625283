package instanceai

import (
	"encoding/base64"
	"errors"
	"fmt"
	"mime"
	"strings"
)

// Attachment is a file sent with a user message. Its JSON is n8n's
// InstanceAiFileAttachment (@n8n/api-types 1.41.0: {type: "file", data,
// mimeType, fileName}, data base64), so that /messages returns a native
// chat's attachments as n8n's own InstanceAiMessage.attachments does. An
// AG-UI content part whose bytes do not travel (a URL source, a provider
// file id) has no data: it adds url or fileId, and kind keeps the part's
// type (image, audio, document), which a MIME type alone may not tell.
type Attachment struct {
	Type     string `json:"type"` // "file"
	Data     string `json:"data"`
	MimeType string `json:"mimeType"`
	FileName string `json:"fileName"`
	Kind     string `json:"kind,omitempty"`
	URL      string `json:"url,omitempty"`
	FileID   string `json:"fileId,omitempty"`
	// Provider is who issued FileID (AG-UI's FileSource.provider).
	Provider string `json:"provider,omitempty"`
}

// AttachmentFile is the one attachment type stored: n8n's file attachment.
const AttachmentFile = "file"

// Attachment kinds: the media types of AG-UI's content parts.
const (
	KindImage    = "image"
	KindAudio    = "audio"
	KindVideo    = "video"
	KindDocument = "document"
)

// Attachment limits, n8n Instance AI's own (@n8n/api-types 1.41.0): 10 MiB
// of base64 per file and 16 MiB in all (MAX_ATTACHMENT_BASE64_BYTES,
// MAX_TOTAL_ATTACHMENT_BASE64_BYTES), which are these decoded sizes
// (MAX_ATTACHMENT_DECODED_BYTES, MAX_TOTAL_ATTACHMENT_DECODED_BYTES), and
// at most 10 attachments per message. A message n8n takes is taken here,
// and one it refuses is refused.
const (
	MaxAttachmentBytes        = 10 << 20 / 4 * 3 // 7.5 MiB
	MaxMessageAttachmentBytes = 16 << 20 / 4 * 3 // 12 MiB
	MaxAttachments            = 10
	MaxMimeTypeLen            = 100
	MaxFileNameLen            = 300
)

// EffectiveKind is the attachment's kind: Kind when set, else what its
// MIME type says (image/*, audio/*, video/*; anything else a document).
func (a Attachment) EffectiveKind() string {
	if a.Kind != "" {
		return a.Kind
	}
	return KindOfMimeType(a.MimeType)
}

// KindOfMimeType is the kind of a file of MIME type mt.
func KindOfMimeType(mt string) string {
	switch t, _, _ := strings.Cut(strings.ToLower(mt), "/"); t {
	case "image":
		return KindImage
	case "audio":
		return KindAudio
	case "video":
		return KindVideo
	}
	return KindDocument
}

// AttachmentError is an attachment refused: Field names the offending
// member relative to the attachment ("data", "mimeType", …; "" for the
// attachment itself), and TooLarge marks a size limit (a 413).
type AttachmentError struct {
	Field    string
	Reason   string
	TooLarge bool
}

func (e *AttachmentError) Error() string { return e.Field + ": " + e.Reason }

// DecodedLen checks that s is standard base64 (RFC 4648, padded, as n8n's
// front end and AG-UI's DataSource send it) and returns how many bytes it
// decodes to, without holding them.
func DecodedLen(s string) (int, error) {
	if len(s)%4 != 0 {
		return 0, fmt.Errorf("is not base64: its length %d is not a multiple of 4", len(s))
	}
	// The decoder skips line breaks; a value with any is refused, so that
	// its length says what it decodes to.
	if i := strings.IndexAny(s, "\r\n"); i >= 0 {
		return 0, fmt.Errorf("is not base64: a line break at byte %d", i)
	}
	const chunk = 4 << 10
	var buf [chunk / 4 * 3]byte
	n := 0
	for off := 0; off < len(s); off += chunk {
		part := s[off:min(off+chunk, len(s))]
		if off+len(part) < len(s) && strings.HasSuffix(part, "=") {
			return 0, fmt.Errorf("is not base64: padding inside the data")
		}
		k, err := base64.StdEncoding.Decode(buf[:], []byte(part))
		if err != nil {
			var ce base64.CorruptInputError
			if errors.As(err, &ce) {
				return 0, fmt.Errorf("is not base64: illegal data at byte %d", off+int(ce))
			}
			return 0, fmt.Errorf("is not base64: %v", err)
		}
		n += k
	}
	return n, nil
}

// CheckMimeType checks that mt is a MIME type: type/subtype, with optional
// parameters, at most MaxMimeTypeLen bytes.
func CheckMimeType(mt string) error {
	if mt == "" {
		return fmt.Errorf("is required")
	}
	if len(mt) > MaxMimeTypeLen {
		return fmt.Errorf("must be at most %d characters", MaxMimeTypeLen)
	}
	media, _, err := mime.ParseMediaType(mt)
	if err != nil || !strings.Contains(media, "/") || strings.HasSuffix(media, "/") || strings.HasPrefix(media, "/") {
		return fmt.Errorf("%q is not a MIME type (type/subtype, e.g. image/png)", mt)
	}
	return nil
}

// MediaType is mt without its parameters, lowercase.
func MediaType(mt string) string {
	media, _, err := mime.ParseMediaType(mt)
	if err != nil {
		return strings.ToLower(strings.TrimSpace(mt))
	}
	return media
}

// Chat Completions image types (OpenAI's vision input: PNG, JPEG, WEBP,
// non-animated GIF) and audio formats (input_audio.format: wav, mp3).
var (
	imageTypes = map[string]bool{"image/png": true, "image/jpeg": true, "image/jpg": true, "image/webp": true, "image/gif": true}
	audioTypes = map[string]string{
		"audio/wav": "wav", "audio/x-wav": "wav", "audio/wave": "wav", "audio/vnd.wave": "wav",
		"audio/mpeg": "mp3", "audio/mp3": "mp3", "audio/mpeg3": "mp3", "audio/x-mpeg-3": "mp3",
	}
)

// AudioFormat is the Chat Completions input_audio format of MIME type mt
// ("wav" or "mp3"), "" for any other.
func AudioFormat(mt string) string { return audioTypes[MediaType(mt)] }

// CheckDeliverable says whether an LLM agent can hand the attachment to a
// Chat Completions model, the one multimodal dialect Threadline speaks:
// an image as image_url (inline PNG/JPEG/WEBP/GIF, or an http(s) or data
// URL), audio as input_audio (inline WAV or MP3 only), a document as a
// file part (inline, or a provider file id). Video, audio by URL or file
// id, an image by file id and a document by URL have no form there; the
// message is refused before any run starts rather than sent without them.
// The attachment's own fields are checked first (CheckMimeType, base64).
func CheckDeliverable(a Attachment) *AttachmentError {
	kind := a.EffectiveKind()
	src := "data"
	switch {
	case a.URL != "":
		src = "url"
	case a.FileID != "":
		src = "file"
	}
	mt := MediaType(a.MimeType)
	switch kind {
	case KindImage:
		switch src {
		case "data":
			if !imageTypes[mt] {
				return &AttachmentError{Field: "mimeType", Reason: fmt.Sprintf("an inline image must be image/png, image/jpeg, image/webp or image/gif, got %q", a.MimeType)}
			}
		case "url":
			u := strings.ToLower(a.URL)
			if !strings.HasPrefix(u, "https://") && !strings.HasPrefix(u, "http://") && !strings.HasPrefix(u, "data:image/") {
				return &AttachmentError{Field: "url", Reason: "an image URL must be http(s) or a data:image/… URL"}
			}
		case "file":
			return &AttachmentError{Reason: "an image by provider file id cannot be sent: Chat Completions takes images as URLs or inline data only"}
		}
	case KindAudio:
		if src != "data" {
			return &AttachmentError{Reason: "audio can be sent only as inline data (WAV or MP3): Chat Completions' input_audio takes no URL or file id"}
		}
		if AudioFormat(a.MimeType) == "" {
			return &AttachmentError{Field: "mimeType", Reason: fmt.Sprintf("inline audio must be WAV (audio/wav) or MP3 (audio/mpeg), the formats of Chat Completions' input_audio, got %q", a.MimeType)}
		}
	case KindDocument:
		if src == "url" {
			return &AttachmentError{Reason: "a document by URL cannot be sent: Chat Completions' file part takes inline data or a provider file id"}
		}
	case KindVideo:
		return &AttachmentError{Reason: "video cannot be sent: Chat Completions has no video input"}
	default:
		return &AttachmentError{Field: "kind", Reason: fmt.Sprintf("%q is not one of image, audio, video, document", kind)}
	}
	return nil
}
