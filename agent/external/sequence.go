package external

// sequence is the order of a run's appends: the producer that drives the
// run, its epoch, and the sequence number its next event takes. It fences
// off other producers and older epochs, and tells an append which of its
// events an earlier try stored already.
type sequence struct {
	producer string
	epoch    int64
	next     int64
}

// admit checks an append by producer id of epoch whose n events are
// numbered from seq, and returns how many of them are stored already
// (the first, up to next). The first append names the run's producer; a
// higher epoch of it has restarted and counts from 0 again.
func (s *sequence) admit(id string, epoch, seq int64, n int) (duplicates int, err error) {
	switch {
	case s.producer == "":
		s.producer, s.epoch = id, epoch
	case id != s.producer:
		return 0, ErrProducerConflict
	case epoch < s.epoch:
		return 0, &FencedError{Epoch: epoch, Current: s.epoch}
	case epoch > s.epoch:
		s.epoch, s.next = epoch, 0
	}
	if seq > s.next {
		return 0, &SequenceGapError{Seq: seq, Next: s.next}
	}
	return int(min(s.next-seq, int64(n))), nil
}

// stored counts an event stored under the next sequence number.
func (s *sequence) stored() { s.next++ }
