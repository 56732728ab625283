package storagetest

import (
	"context"
	"reflect"
	"testing"

	"github.com/threadline/threadline/instanceai"
)

// testMessageAttachments checks that a message's attachments come back as
// they were stored, that a message without any reads none (as every
// message stored before attachments were kept does), and that a head
// counts them in its size.
func testMessageAttachments(t *testing.T, s instanceai.Store) {
	ctx := context.Background()
	ensure(t, s, "att", "owner")
	atts := []instanceai.Attachment{
		{Type: "file", Data: "iVBORw0KGgo=", MimeType: "image/png", FileName: "dot ☃.png"},
		{Type: "file", MimeType: "image/jpeg", Kind: instanceai.KindImage, URL: "https://example.com/a.jpg"},
		{Type: "file", MimeType: "application/pdf", Kind: instanceai.KindDocument, FileID: "file-abc", Provider: "openai"},
	}
	if err := s.AddMessage(ctx, instanceai.Message{ID: "a1", ThreadID: "att", RunID: "r1", Role: "user", Content: "look", Attachments: atts}); err != nil {
		t.Fatalf("AddMessage with attachments: %v", err)
	}
	if err := s.AddMessage(ctx, instanceai.Message{ID: "a2", ThreadID: "att", RunID: "r2", Role: "user", Content: "plain"}); err != nil {
		t.Fatalf("AddMessage: %v", err)
	}

	for name, read := range map[string]func() ([]instanceai.Message, error){
		"ListMessages": func() ([]instanceai.Message, error) { return s.ListMessages(ctx, "att") },
		"MessagesByID": func() ([]instanceai.Message, error) { return s.MessagesByID(ctx, "att", []string{"a1", "a2"}) },
	} {
		got, err := read()
		if err != nil || len(got) != 2 {
			t.Fatalf("%s = %+v, %v; want 2 messages", name, got, err)
		}
		if !reflect.DeepEqual(got[0].Attachments, atts) {
			t.Errorf("%s: attachments = %+v, want %+v", name, got[0].Attachments, atts)
		}
		if got[1].Attachments != nil {
			t.Errorf("%s: a message stored without attachments reads %+v, want none", name, got[1].Attachments)
		}
	}
	heads, err := s.MessageHeads(ctx, "att")
	if err != nil || len(heads) != 2 {
		t.Fatalf("MessageHeads = %+v, %v", heads, err)
	}
	if heads[0].Attachments != nil || heads[0].Size <= len("look")+len("iVBORw0KGgo=") {
		t.Errorf("head of the message with attachments = %+v; want no attachments and a size that counts them", heads[0])
	}
	if heads[1].Size != len("plain") {
		t.Errorf("head of a plain message: size %d, want %d", heads[1].Size, len("plain"))
	}
}
