// Package records checks the messages and confirmations a backend is asked
// to store, so that every backend refuses the same malformed input with the
// same words before it touches its storage, and encodes events as every
// backend's rows hold them.
package records

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"

	"github.com/threadline/threadline/instanceai"
)

// Message checks a message for AddMessage. A missing thread is the
// backend's to report (as instanceai.ErrNotFound).
func Message(m instanceai.Message) error {
	switch {
	case m.ID == "":
		return errors.New("empty message id")
	case m.Role == "":
		return errors.New("empty role")
	}
	return nil
}

// EncodeAttachments is the attachments column of a message: their JSON
// array, or "" for none (as every message stored before they were kept
// reads).
func EncodeAttachments(a []instanceai.Attachment) (string, error) {
	if len(a) == 0 {
		return "", nil
	}
	b, err := json.Marshal(a)
	if err != nil {
		return "", fmt.Errorf("encode attachments: %w", err)
	}
	return string(b), nil
}

// DecodeAttachments reads an attachments column back ("" is none).
func DecodeAttachments(s string) ([]instanceai.Attachment, error) {
	if s == "" {
		return nil, nil
	}
	var a []instanceai.Attachment
	if err := json.Unmarshal([]byte(s), &a); err != nil {
		return nil, fmt.Errorf("decode attachments: %w", err)
	}
	return a, nil
}

// Confirmation checks a confirmation for AddConfirmation and returns its
// status: a new confirmation is pending (an empty status means pending) and
// carries no answer yet.
func Confirmation(c instanceai.Confirmation) (status string, err error) {
	switch {
	case c.RequestID == "":
		return "", errors.New("empty request id")
	case c.Status != "" && c.Status != instanceai.ConfirmationPending:
		return "", fmt.Errorf("a new confirmation is %s, not %q; answer it with AnswerConfirmation", instanceai.ConfirmationPending, c.Status)
	case len(c.Answer) > 0 || !c.AnsweredAt.IsZero():
		return "", errors.New("a new confirmation carries no answer")
	case !json.Valid(c.Request):
		return "", errors.New("request is not valid JSON")
	}
	return instanceai.ConfirmationPending, nil
}

// Answer checks the arguments of AnswerConfirmation: the new status is not
// pending, and the answer, when there is one, is JSON.
func Answer(status string, answer json.RawMessage) error {
	switch {
	case status == "" || status == instanceai.ConfirmationPending:
		return fmt.Errorf("answer status %q: an answer moves a confirmation out of %s", status, instanceai.ConfirmationPending)
	case len(answer) > 0 && !json.Valid(answer):
		return errors.New("answer is not valid JSON")
	}
	return nil
}

// EncodeEvents encodes events as the log's rows hold them.
func EncodeEvents(events []instanceai.Event) ([][]byte, error) {
	data := make([][]byte, len(events))
	for i := range events {
		b, err := json.Marshal(&events[i])
		if err != nil {
			return nil, fmt.Errorf("encode event %d (%s): %w", i, events[i].Type, err)
		}
		data[i] = b
	}
	return data, nil
}

// CheckEncoded checks that there is one encoding per event.
func CheckEncoded(events []instanceai.Event, data [][]byte) error {
	if len(data) != len(events) {
		return fmt.Errorf("%d encodings for %d events", len(data), len(events))
	}
	return nil
}

// EventsUser returns the one user the events carry ("" when none carries
// one): an append stores events only in a thread their user owns, so
// that a run that outlived its thread cannot write into another user's
// thread that took the id. Two users in one batch cannot both own the
// thread, so they fail as a thread that is not there.
func EventsUser(events []instanceai.Event) (string, error) {
	user := ""
	for i := range events {
		u := events[i].UserID
		switch {
		case u == "" || u == user:
		case user == "":
			user = u
		default:
			return "", fmt.Errorf("events of users %q and %q in one append: %w", user, u, instanceai.ErrNotFound)
		}
	}
	return user, nil
}

// Fences checks that there is one fencing token per event and returns the
// distinct non-zero ones, in the order they first appear: the tokens an
// append must find held by claim rows of its thread.
func Fences(events []instanceai.Event, fences []int64) ([]int64, error) {
	if len(fences) != len(events) {
		return nil, fmt.Errorf("%d fencing tokens for %d events", len(fences), len(events))
	}
	var distinct []int64
	for _, f := range fences {
		if f != 0 && !slices.Contains(distinct, f) {
			distinct = append(distinct, f)
		}
	}
	return distinct, nil
}

// Stale returns the tokens that held does not contain, in order.
func Stale(tokens, held []int64) []int64 {
	var stale []int64
	for _, f := range tokens {
		if !slices.Contains(held, f) {
			stale = append(stale, f)
		}
	}
	return stale
}
