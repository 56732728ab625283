package check

import (
	"fmt"
	"slices"
	"time"
	"unicode/utf8"

	"github.com/threadline/threadline/instanceai"
)

// Acked is an event a producer's append (or its finish) was answered 200
// for, stored or acknowledged as a duplicate of an earlier try: the publish
// API promises that it is in the log (docs/publish-api.md, "Never
// acknowledged unless stored").
type Acked struct {
	Thread, Run string
	// Type and Marker name the event: a tool-call or tool-result by its
	// toolCallId, a tasks-update by the id of its last task, the run-finish
	// of an answered finish by its status. Each marker is unique in a run.
	Type   instanceai.EventType
	Marker string
	// Seq is the event's producer sequence number.
	Seq int64
	// Instance is the instance whose answer acknowledged it, At when.
	Instance string
	At       time.Time
	// Duplicate is set when the answer counted it as a duplicate of an
	// earlier try whose answer the producer did not get.
	Duplicate bool
}

// marker is what names a stored event for the acknowledgement check, or
// "" for events it does not look at (see Acked.Marker).
func marker(ev *instanceai.Event) string {
	switch p := ev.Payload.(type) {
	case *instanceai.ToolCall:
		return p.ToolCallID
	case *instanceai.ToolResult:
		return p.ToolCallID
	case *instanceai.TasksUpdate:
		if n := len(p.Tasks.Tasks); n > 0 {
			return p.Tasks.Tasks[n-1].ID
		}
	case *instanceai.RunFinish:
		return p.Status
	}
	return ""
}

type markedKey struct {
	run    string
	typ    instanceai.EventType
	marker string
}

// judgeAcked checks that every acknowledged event is in the log, once.
func judgeAcked(acked []Acked, log *Log, facts map[string]map[string]*runFacts) []Anomaly {
	stored := map[string]map[markedKey][]int64{} // thread → event → seqs
	index := func(thread string) map[markedKey][]int64 {
		if m, ok := stored[thread]; ok {
			return m
		}
		m := map[markedKey][]int64{}
		for _, r := range log.Threads[thread] {
			if mk := marker(&r.Event); mk != "" {
				k := markedKey{r.Event.RunID, r.Event.Type, mk}
				m[k] = append(m[k], r.Seq)
			}
		}
		stored[thread] = m
		return m
	}
	var out []Anomaly
	seen := map[markedKey]bool{}
	for _, a := range acked {
		k := markedKey{a.Run, a.Type, a.Marker}
		if seen[k] {
			continue // acknowledged again by a retry: judged once
		}
		seen[k] = true
		how := "stored"
		if a.Duplicate {
			how = "a duplicate of an earlier try"
		}
		seqs := index(a.Thread)[k]
		switch {
		case len(seqs) == 0:
			out = append(out, Anomaly{Kind: AckLost, Thread: a.Thread, Run: a.Run,
				Detail: fmt.Sprintf("%s %s (producer seq %d) acknowledged through %s at %s as %s is not in the log; the run %s",
					a.Type, a.Marker, a.Seq, a.Instance, a.At.Format(timeFormat), how, ending(facts[a.Thread][a.Run]))})
		case len(seqs) > 1 && a.Type != instanceai.TypeRunFinish:
			// Two run-finishes are a double-finish, judged as such.
			out = append(out, Anomaly{Kind: StoredTwice, Thread: a.Thread, Run: a.Run, Seq: seqs[1],
				Detail: fmt.Sprintf("%s %s (producer seq %d, acknowledged through %s at %s) is in the log %d times: seqs %v",
					a.Type, a.Marker, a.Seq, a.Instance, a.At.Format(timeFormat), len(seqs), seqs)})
		}
	}
	return out
}

// ending says how the log ended a run, for evidence.
func ending(f *runFacts) string {
	switch {
	case f == nil:
		return "has no event in the log"
	case len(f.finishes) == 0:
		return "has no run-finish in the log"
	}
	fin := f.finishes[0]
	return fmt.Sprintf("ended %s at seq %d", finishWords(&fin.Event), fin.Seq)
}

// Bounds are the instances' size bounds (--max-event-bytes,
// --max-segment-bytes).
type Bounds struct {
	MaxEventBytes, MaxSegmentBytes int
}

// Oversized is a run whose producer went past the segment bound on
// purpose: an upstream AG-UI agent streaming one huge message, or a
// publish producer appending huge deltas to one segment.
type Oversized struct {
	Thread, Run string
	// Source says which producer it was, Instance where the run was.
	Source, Instance string
	// Answers counts a publish producer's answers by status and code
	// ("200", "413 segment_too_large", "no answer"): exactly one is to be
	// the 413 of the delta that crossed the bound.
	Answers map[string]int
}

// tooLarge is the answer to the append that takes a segment past its
// bound.
const tooLarge = "413 " + instanceai.CodeSegmentTooLarge

// judgeOversized checks that each oversized run ended as the segment
// bound says: one run-finish, error/segment_too_large, after an error
// event with that code, its text cut at exactly the bound, and a publish
// producer told so once.
func judgeOversized(runs []Oversized, log *Log, facts map[string]map[string]*runFacts, b Bounds) []Anomaly {
	var out []Anomaly
	for _, o := range runs {
		bad := func(format string, args ...any) {
			out = append(out, Anomaly{Kind: BoundNotKept, Thread: o.Thread, Run: o.Run,
				Detail: fmt.Sprintf("%s run through %s: ", o.Source, o.Instance) + fmt.Sprintf(format, args...)})
		}
		f := facts[o.Thread][o.Run]
		if f == nil || len(f.finishes) != 1 {
			n := 0
			if f != nil {
				n = len(f.finishes)
			}
			bad("%d run-finishes in the log, want exactly one", n)
			continue
		}
		fin := f.finishes[0]
		if p := fin.Event.Payload.(*instanceai.RunFinish); p.Status != instanceai.RunError || p.Reason != instanceai.CodeSegmentTooLarge {
			bad("it ended %s at seq %d, want %s/%s", finishWords(&fin.Event), fin.Seq, instanceai.RunError, instanceai.CodeSegmentTooLarge)
			continue
		}
		errors, text, blocks := 0, 0, 0
		for _, r := range log.Threads[o.Thread] {
			if r.Event.RunID != o.Run {
				continue
			}
			switch p := r.Event.Payload.(type) {
			case *instanceai.ErrorPayload:
				if p.Code == instanceai.CodeSegmentTooLarge {
					errors++
				}
			case *instanceai.Text:
				if r.Event.Type == instanceai.TypeTextBlock {
					text += escapedLen(p.Text)
					blocks++
				}
			}
		}
		switch {
		case o.Answers != nil && o.Answers[tooLarge] != 1:
			bad("its appends were answered %v, want exactly one %s", o.Answers, tooLarge)
		case errors != 1:
			bad("%d error events with code %s, want one", errors, instanceai.CodeSegmentTooLarge)
		case text != b.MaxSegmentBytes:
			bad("its text blocks (%d) hold %d bytes as stored, want exactly the bound, %d (--max-segment-bytes)", blocks, text, b.MaxSegmentBytes)
		}
	}
	return out
}

// escapedLen is the length of s as encoding/json writes it in a string,
// without the quotes (HTML escaping on, invalid bytes as \ufffd): what the
// segment bound counts.
func escapedLen(s string) int {
	n := 0
	for i := 0; i < len(s); {
		r, size := utf8.DecodeRuneInString(s[i:])
		i += size
		switch {
		case r == '"' || r == '\\' || r == '\n' || r == '\r' || r == '\t' || r == '\b' || r == '\f':
			n += 2
		case r < 0x20 || r == '<' || r == '>' || r == '&' || r == '\u2028' || r == '\u2029' || r == utf8.RuneError && size == 1:
			n += 6
		default:
			n += size
		}
	}
	return n
}

// judgeSizes reports every stored event larger than the bound on one
// event.
func judgeSizes(log *Log, b Bounds) []Anomaly {
	if b.MaxEventBytes <= 0 {
		return nil
	}
	threads := make([]string, 0, len(log.Threads))
	for th := range log.Threads {
		threads = append(threads, th)
	}
	slices.Sort(threads)
	var out []Anomaly
	for _, th := range threads {
		for _, r := range log.Threads[th] {
			if len(r.Data) > b.MaxEventBytes {
				out = append(out, Anomaly{Kind: EventTooLarge, Thread: th, Run: r.Event.RunID, Seq: r.Seq,
					Detail: fmt.Sprintf("a stored %s of %d bytes, over the bound of %d (--max-event-bytes)", r.Event.Type, len(r.Data), b.MaxEventBytes)})
			}
		}
	}
	return out
}

// Memory is one instance's peak resident memory while the harness made
// the cluster take an oversized producer.
type Memory struct {
	Instance string
	// Phase says which producer it was; Owner whether the run was on this
	// instance (the others served its clients and heard it on the bus).
	Phase string
	Owner bool
	// Peak is the peak resident set (VmHWM) in bytes over the phase.
	Peak int64
}

// judgeMemory reports the peaks over bound (0: not judged).
func judgeMemory(mem []Memory, bound int64) []Anomaly {
	if bound <= 0 {
		return nil
	}
	var out []Anomaly
	for _, m := range mem {
		if m.Peak > bound {
			where := "another instance's run"
			if m.Owner {
				where = "its own run"
			}
			out = append(out, Anomaly{Kind: MemoryOverBound,
				Detail: fmt.Sprintf("instance %s peaked at %s resident while %s (%s), over the bound of %s",
					m.Instance, MB(m.Peak), m.Phase, where, MB(bound))})
		}
	}
	return out
}

// MB writes a byte count in megabytes (10⁶ bytes), as the goal is set.
func MB(n int64) string {
	return fmt.Sprintf("%.0f MB", float64(n)/1e6)
}
