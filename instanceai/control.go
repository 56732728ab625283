package instanceai

import (
	"context"
	"encoding/json"
)

// Controller sends a control message to the other instances.
type Controller interface {
	SendControl(Control)
}

// Control kinds.
const (
	ControlCancel = "cancel"
	ControlAnswer = "answer"
	ControlDelete = "delete"
)

// Control asks the instance that runs a thread's work to act on it: the
// database is the source of truth (the answer is stored, the thread is
// deleted), the message only makes the owner act at once.
type Control struct {
	Kind      string `json:"k"`
	ThreadID  string `json:"t"`
	RequestID string `json:"q,omitempty"`
	Reason    string `json:"r,omitempty"`
}

type noControl struct{}

func (noControl) SendControl(Control) {}

// ThreadDeleted tells the other instances that the thread is gone: they
// stop what they still run of it and end its open streams.
func (m *Runs) ThreadDeleted(threadID string) {
	m.control.SendControl(Control{Kind: ControlDelete, ThreadID: threadID})
}

// HandleControl acts on a control message from another instance.
func (m *Runs) HandleControl(c Control) {
	switch c.Kind {
	case ControlCancel:
		m.cancelLocal(c.ThreadID, c.Reason)
	case ControlDelete:
		m.cancelLocal(c.ThreadID, ReasonUserCancelled)
	case ControlAnswer:
		m.deliverAnswer(c.RequestID)
	}
}

// deliverAnswer hands an answer stored by another instance to the run of
// this process that waits for it.
func (m *Runs) deliverAnswer(requestID string) {
	wait := m.confirmations.waiter(requestID)
	if wait == nil || m.confirmations.store == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), claimTimeout)
	defer cancel()
	c, err := m.confirmations.store.GetConfirmation(ctx, requestID)
	if err != nil {
		m.log.Error("could not read an answer stored by another instance", "request", requestID, "err", err)
		return
	}
	if c.Status != ConfirmationApproved && c.Status != ConfirmationDenied {
		return
	}
	var a Answer
	if err := json.Unmarshal(c.Answer, &a); err != nil {
		m.log.Error("stored answer does not decode", "request", requestID, "err", err)
		return
	}
	select {
	case wait <- a:
	default: // already delivered
	}
}
