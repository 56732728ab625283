package publishapi

import (
	"context"
	"errors"
	"net/http"

	"github.com/threadline/threadline/agent/external"
	"github.com/threadline/threadline/instanceai"
	"github.com/threadline/threadline/server/httpjson"
)

// producerError answers what the producer domain refused: a run it does
// not drive here, another producer's or an older epoch's append, a gap in
// the sequence. Any other error is returned as it is.
func producerError(err error) error {
	var (
		missing   *external.RunNotFoundError
		elsewhere *external.RunOnAnotherInstanceError
		fenced    *external.FencedError
		gap       *external.SequenceGapError
	)
	switch {
	case errors.As(err, &missing):
		return httpjson.NewError(http.StatusNotFound, "run_not_found", "runId", "%s", missing.Error())
	case errors.As(err, &elsewhere):
		return httpjson.NewError(http.StatusConflict, "run_on_another_instance", "runId", "%s", elsewhere.Error())
	case errors.Is(err, external.ErrProducerConflict):
		return httpjson.NewError(http.StatusConflict, "producer_conflict", HeaderProducerID, "%s", external.ErrProducerConflict.Error())
	case errors.As(err, &fenced):
		return httpjson.NewError(http.StatusConflict, "producer_fenced", HeaderProducerEpoch, "%s", fenced.Error())
	case errors.As(err, &gap):
		return httpjson.NewError(http.StatusConflict, "sequence_gap", HeaderProducerSeq,
			"%s %d leaves a gap: the next event is %d", HeaderProducerSeq, gap.Seq, gap.Next)
	}
	return err
}

// runError turns the run's end, as an append, a confirm or a finish met
// it, into the answer a producer acts on.
func runError(err error) error {
	switch {
	case errors.Is(err, external.ErrRunCancelled):
		return httpjson.NewError(http.StatusConflict, "run_cancelled", "runId", "the run was cancelled")
	case errors.Is(err, instanceai.ErrRunFinished):
		return httpjson.NewError(http.StatusConflict, "run_finished", "runId", "the run has finished")
	case errors.Is(err, context.Canceled) || instanceai.IsCancelled(err):
		return httpjson.NewError(http.StatusConflict, "run_cancelled", "runId", "the run was cancelled: %v", err)
	}
	return err
}

// refusedAt names where in the request an event the run's door refused
// was: a rule of the log it breaks (400, the field within the event), or a
// size bound it is over (413).
func refusedAt(refused *external.RefusedError, where string) error {
	var rule *instanceai.RuleError
	var limit *instanceai.LimitError
	switch {
	case errors.As(refused.Err, &rule):
		return httpjson.NewError(http.StatusBadRequest, instanceai.CodeRuleBroken, where+"."+rule.Field, "%s: %v", where, refused.Err).
			With(map[string]any{"rule": rule.Rule, "eventType": rule.Type})
	case errors.As(refused.Err, &limit):
		return httpjson.NewError(http.StatusRequestEntityTooLarge, limit.Code, where, "%s: %v", where, refused.Err).
			With(map[string]any{"limit": limit.Limit, "eventType": limit.Type})
	}
	return refused.Err
}

// atIndex names where in the body an invalid event was.
func atIndex(err error, where string) error {
	var e *httpjson.Error
	if errors.As(err, &e) {
		return err
	}
	return httpjson.NewError(http.StatusBadRequest, "invalid_event", where, "%s: %v", where, err)
}
