package external

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/threadline/threadline/instanceai"
)

// Producer is a run that a producer outside Threadline drives: its
// appends' order, the producer's presence, and how the run's agent learns
// of the producer's finish. Its methods are safe to call concurrently.
type Producer struct {
	run      *instanceai.Run
	presence *presence

	// mu serialises appends: the sequence is the run's.
	mu  sync.Mutex
	seq sequence
	// cancelled is set when the run's cancel ended it: later appends are
	// refused as cancelled, not only as finished.
	cancelled bool

	end     chan error
	endOnce sync.Once
}

func newProducer(lease time.Duration) *Producer {
	return &Producer{presence: newPresence(lease), end: make(chan error, 1)}
}

// Run is the run the producer drives.
func (p *Producer) Run() *instanceai.Run { return p.run }

// Hold marks a request of the producer under way until release: the
// producer is there meanwhile, whatever the lease. The first attaches the
// producer to its run.
func (p *Producer) Hold() (release func()) { return p.presence.hold() }

// Touch renews the lease: the producer is there.
func (p *Producer) Touch() { p.presence.touch() }

// Finish ends the run: completed when end is nil, else in error with end.
// Only the first call counts.
func (p *Producer) Finish(end error) { p.endOnce.Do(func() { p.end <- end }) }

// drive is the run's agent: it waits for the producer to finish the run,
// for the run's end (a cancel), or for the lease to run out with no
// request under way.
func (p *Producer) drive(ctx context.Context, _ *instanceai.Run) error {
	t := time.NewTimer(p.presence.lease)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			cause := context.Cause(ctx)
			p.mu.Lock()
			p.cancelled = instanceai.IsCancelled(cause)
			p.mu.Unlock()
			return cause
		case err := <-p.end:
			return err
		case <-p.presence.renewed:
			if !t.Stop() {
				select {
				case <-t.C:
				default:
				}
			}
			t.Reset(p.presence.lease)
		case <-t.C:
			if p.presence.underWay() {
				t.Reset(p.presence.lease)
				continue
			}
			return &instanceai.ProviderError{Code: "producer_gone",
				Message: "the run's producer sent nothing for " + p.presence.lease.String() + ": it is taken for gone"}
		}
	}
}

// notAppended are the event types a producer does not append: the run's
// start and finish are Threadline's (Finish ends the run), and a
// confirmation is asked through the run's Confirm, which waits for the
// answer.
var notAppended = map[instanceai.EventType]string{
	instanceai.TypeRunStart:       "the run-start is Threadline's",
	instanceai.TypeRunFinish:      "finish the run with POST …/finish",
	instanceai.TypeConfirmRequest: "ask with POST …/confirm, which answers with the person's answer",
}

// Check returns ev as the run would take it, stamped with the run's ids
// and the time (the run, its user and the time are Threadline's to
// stamp), or why the run would not: a type a producer does not append
// (ErrNotAppendable), or an invalid event.
func (p *Producer) Check(ev instanceai.Event) (instanceai.Event, error) {
	if why, ok := notAppended[ev.Type]; ok {
		return ev, fmt.Errorf("%w %s events: %s", ErrNotAppendable, ev.Type, why)
	}
	ev.UserID, ev.TS = "", 0
	ev = p.run.Stamp(ev)
	return ev, ev.Validate()
}

// Receipt is what an append did.
type Receipt struct {
	// NextSeq is the sequence number the producer's next event takes.
	NextSeq int64
	// Stored counts the events stored now; Duplicates those an earlier
	// try stored already, acknowledged again.
	Stored, Duplicates int
	// Durable is set when an event of the append, stored now or a
	// duplicate, is one the log stores as it comes: the append is done
	// only once it is stored (the run's Sync). A duplicate's first try may
	// still be on its way to the log, or have been dropped (its run taken
	// over).
	Durable bool
}

// Add counts another append's receipt into r.
func (r *Receipt) Add(b Receipt) {
	r.NextSeq = b.NextSeq
	r.Stored += b.Stored
	r.Duplicates += b.Duplicates
	r.Durable = r.Durable || b.Durable
}

// Append hands the run the events whose sequence numbers start at seq,
// sent by producer id of epoch, skipping those an earlier try stored. The
// receipt says where the producer goes on from, whatever the error:
//   - ErrProducerConflict, *FencedError, *SequenceGapError: nothing was
//     taken;
//   - *RefusedError: an event the run's door refused, and what came
//     before it was taken;
//   - ErrRunCancelled, or the run's own error (instanceai.ErrRunFinished,
//     …): the run has ended.
func (p *Producer) Append(id string, epoch, seq int64, events []instanceai.Event) (Receipt, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	dupes, err := p.seq.admit(id, epoch, seq, len(events))
	if err != nil {
		return Receipt{NextSeq: p.seq.next}, err
	}
	r := Receipt{Duplicates: dupes}
	for _, ev := range events[:dupes] {
		r.Durable = r.Durable || durable(ev)
	}
	for i, ev := range events[dupes:] {
		if err := p.run.Emit(ev); err != nil {
			r.NextSeq = p.seq.next
			return r, p.refusal(err, dupes+i)
		}
		p.seq.stored()
		r.Stored++
		r.Durable = r.Durable || durable(ev)
	}
	r.NextSeq = p.seq.next
	return r, nil
}

// NextSeq is the sequence number the producer's next event takes.
func (p *Producer) NextSeq() int64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.seq.next
}

func durable(ev instanceai.Event) bool {
	return instanceai.DurabilityOf(ev.Type) != instanceai.Ephemeral
}

// refusal is why Emit did not take the append's index-th event. p.mu is
// held.
func (p *Producer) refusal(err error, index int) error {
	if p.cancelled {
		return ErrRunCancelled
	}
	var rule *instanceai.RuleError
	var limit *instanceai.LimitError
	if errors.As(err, &rule) || errors.As(err, &limit) {
		return &RefusedError{Index: index, Err: err}
	}
	return err
}

// Over is why a request to the producer's run, which has ended, fails:
// what became of events it was sent (another instance took the run over,
// the store failed), its cancel (ErrRunCancelled), or its finish
// (instanceai.ErrRunFinished).
func (p *Producer) Over() error {
	if err := p.run.NotStored(); err != nil {
		return err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cancelled {
		return ErrRunCancelled
	}
	return instanceai.ErrRunFinished
}
