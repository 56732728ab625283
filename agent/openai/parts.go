package openai

import (
	"mime"

	"github.com/threadline/threadline/instanceai"
)

// Chat Completions user content parts (OpenAI's API reference,
// ChatCompletionRequestUserMessageContentPart): text, image_url {url,
// detail?}, input_audio {data, format: wav|mp3} and file {file_data?,
// file_id?, filename?}. OpenAI-compatible servers that take images (vLLM,
// Ollama, LM Studio, llama.cpp) read the image_url form.
type (
	wirePart struct {
		Type       string          `json:"type"`
		Text       *string         `json:"text,omitempty"`
		ImageURL   *wireImageURL   `json:"image_url,omitempty"`
		InputAudio *wireInputAudio `json:"input_audio,omitempty"`
		File       *wireFile       `json:"file,omitempty"`
	}
	wireImageURL struct {
		URL string `json:"url"`
	}
	wireInputAudio struct {
		Data   string `json:"data"`
		Format string `json:"format"`
	}
	wireFile struct {
		FileData string `json:"file_data,omitempty"`
		FileID   string `json:"file_id,omitempty"`
		Filename string `json:"filename,omitempty"`
	}
)

// userParts renders a user message with attachments as content parts:
// its text first (when it has any), then a part per attachment. The
// surfaces that take attachments refused, before the run started, any
// that has no form here (instanceai.CheckDeliverable); one that slipped
// through is sent as a text note rather than dropped silently.
func userParts(text string, atts []instanceai.Attachment) []wirePart {
	out := make([]wirePart, 0, len(atts)+1)
	if text != "" {
		out = append(out, textPart(text))
	}
	for _, a := range atts {
		out = append(out, attachmentPart(a))
	}
	return out
}

func textPart(s string) wirePart { return wirePart{Type: "text", Text: &s} }

func attachmentPart(a instanceai.Attachment) wirePart {
	if err := instanceai.CheckDeliverable(a); err != nil {
		return textPart("[attachment " + a.FileName + " not sent: " + err.Reason + "]")
	}
	dataURL := "data:" + instanceai.MediaType(a.MimeType) + ";base64," + a.Data
	switch a.EffectiveKind() {
	case instanceai.KindImage:
		if a.URL != "" {
			return wirePart{Type: "image_url", ImageURL: &wireImageURL{URL: a.URL}}
		}
		return wirePart{Type: "image_url", ImageURL: &wireImageURL{URL: dataURL}}
	case instanceai.KindAudio:
		return wirePart{Type: "input_audio", InputAudio: &wireInputAudio{Data: a.Data, Format: instanceai.AudioFormat(a.MimeType)}}
	default:
		if a.FileID != "" {
			return wirePart{Type: "file", File: &wireFile{FileID: a.FileID, Filename: a.FileName}}
		}
		return wirePart{Type: "file", File: &wireFile{FileData: dataURL, Filename: fileName(a)}}
	}
}

// fileName is the attachment's file name, or one made of its MIME type
// ("attachment.pdf"): OpenAI refuses inline file data without a name.
func fileName(a instanceai.Attachment) string {
	if a.FileName != "" {
		return a.FileName
	}
	if ext, _ := mime.ExtensionsByType(instanceai.MediaType(a.MimeType)); len(ext) > 0 {
		return "attachment" + ext[0]
	}
	return "attachment"
}
