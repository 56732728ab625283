package external

import (
	"errors"
	"testing"
)

// The order of a run's appends, step by step: the duplicates an append
// repeats, a gap, another producer, a restart with a higher epoch, and
// the old epoch fenced off.
func TestSequenceAdmitsInOrderAndFences(t *testing.T) {
	var s sequence
	steps := []struct {
		name   string
		id     string
		epoch  int64
		seq    int64
		n      int
		stored int // events the run takes after admit
		dupes  int
		want   error
		next   int64 // next after the step
	}{
		{name: "the first append names the producer", id: "w", seq: 0, n: 2, stored: 2, next: 2},
		{name: "a retry repeats them all", id: "w", seq: 0, n: 2, dupes: 2, next: 2},
		{name: "a retry with more repeats the first", id: "w", seq: 1, n: 3, stored: 2, dupes: 1, next: 4},
		{name: "an empty append at next", id: "w", seq: 4, n: 0, next: 4},
		{name: "a gap", id: "w", seq: 5, n: 1, want: ErrSequenceGap, next: 4},
		{name: "another producer", id: "x", seq: 4, n: 1, want: ErrProducerConflict, next: 4},
		{name: "a restart counts from 0", id: "w", epoch: 1, seq: 0, n: 1, stored: 1, next: 1},
		{name: "the old epoch is fenced", id: "w", epoch: 0, seq: 1, n: 1, want: ErrProducerFenced, next: 1},
		{name: "a gap in the new epoch", id: "w", epoch: 1, seq: 3, n: 1, want: ErrSequenceGap, next: 1},
		{name: "a restart that leaves a gap still takes over", id: "w", epoch: 2, seq: 1, n: 1, want: ErrSequenceGap, next: 0},
		{name: "and fences the epoch before", id: "w", epoch: 1, seq: 0, n: 1, want: ErrProducerFenced, next: 0},
	}
	for _, st := range steps {
		dupes, err := s.admit(st.id, st.epoch, st.seq, st.n)
		if !errors.Is(err, st.want) || (st.want == nil && err != nil) {
			t.Fatalf("%s: admit = %v, want %v", st.name, err, st.want)
		}
		if dupes != st.dupes {
			t.Fatalf("%s: %d duplicates, want %d", st.name, dupes, st.dupes)
		}
		for range st.stored {
			s.stored()
		}
		if s.next != st.next {
			t.Fatalf("%s: next %d, want %d", st.name, s.next, st.next)
		}
	}
}

// The refusals carry what the producer needs to go on.
func TestSequenceRefusalsSayWhere(t *testing.T) {
	s := sequence{producer: "w", epoch: 3, next: 7}
	_, err := s.admit("w", 3, 9, 1)
	var gap *SequenceGapError
	if !errors.As(err, &gap) || gap.Seq != 9 || gap.Next != 7 {
		t.Fatalf("gap: %v", err)
	}
	_, err = s.admit("w", 2, 0, 1)
	var fenced *FencedError
	if !errors.As(err, &fenced) || fenced.Epoch != 2 || fenced.Current != 3 {
		t.Fatalf("fenced: %v", err)
	}
	if s.producer != "w" || s.epoch != 3 || s.next != 7 {
		t.Fatalf("a refusal changed the sequence: %+v", s)
	}
}
