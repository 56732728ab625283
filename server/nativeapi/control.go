package nativeapi

import (
	"errors"
	"net/http"
	"regexp"

	"github.com/gorilla/mux"

	"github.com/threadline/threadline/instanceai"
	"github.com/threadline/threadline/server/auth"
	"github.com/threadline/threadline/server/httpjson"
)

// registerControl mounts the endpoints that steer runs in flight: answers
// to confirmation requests and the thread status.
func (a *API) registerControl(s *mux.Router) {
	s.HandleFunc("/confirm/{requestId}", a.confirm).Methods(http.MethodPost)
	s.HandleFunc("/threads/{threadId}/status", a.status).Methods(http.MethodGet)
	s.HandleFunc("/threads/{threadId}/messages", a.messages).Methods(http.MethodGet)
}

// confirmBody is the union of accepted answer shapes: the seed's
// {approved, userInput?}, and n8n's {kind: "approval"|"questions"|"text", …}.
type confirmBody struct {
	Kind      string                      `json:"kind"`
	Approved  *bool                       `json:"approved"`
	UserInput string                      `json:"userInput"`
	Text      string                      `json:"text"`
	Scope     string                      `json:"scope"`
	Answers   []instanceai.QuestionAnswer `json:"answers"`
}

// answer validates the body into an Answer, naming the offending field.
func (b *confirmBody) answer() (instanceai.Answer, error) {
	bad := func(field, msg string) error {
		return httpjson.NewError(http.StatusBadRequest, "invalid_field", field, "%s", msg)
	}
	if b.Scope != "" && b.Scope != "once" && b.Scope != "session" {
		return instanceai.Answer{}, bad("scope", `scope must be "once" or "session"`)
	}
	switch b.Kind {
	case "", instanceai.AnswerApproval:
		if b.Approved == nil {
			return instanceai.Answer{}, bad("approved", "approved (true or false) is required")
		}
		return instanceai.Answer{Kind: b.Kind, Approved: *b.Approved, UserInput: b.UserInput, Scope: b.Scope}, nil
	case instanceai.AnswerQuestions:
		if b.Answers == nil {
			return instanceai.Answer{}, bad("answers", "answers is required for kind questions")
		}
		for _, q := range b.Answers {
			if q.QuestionID == "" {
				return instanceai.Answer{}, bad("answers.questionId", "every answer needs a questionId")
			}
		}
		return instanceai.Answer{Kind: b.Kind, Approved: true, Answers: b.Answers}, nil
	case instanceai.AnswerText:
		text := b.Text
		if text == "" {
			text = b.UserInput
		}
		if text == "" {
			return instanceai.Answer{}, bad("text", "text is required for kind text")
		}
		return instanceai.Answer{Kind: b.Kind, Approved: true, UserInput: text}, nil
	}
	return instanceai.Answer{}, bad("kind", `kind must be "approval", "questions" or "text"`)
}

var requestIDPattern = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.:-]{0,127}$`)

func (a *API) confirm(w http.ResponseWriter, r *http.Request) {
	runID, outcome, err := a.answerConfirmation(w, r)
	if err != nil {
		httpjson.WriteError(w, err)
		return
	}
	httpjson.Write(w, controlStatus(outcome), confirmResponse{OK: true, RunID: runID, Status: string(outcome)})
}

// confirmResponse is the answer to a confirmation's answer: status
// "applied" (200) once the run took it, "accepted" (202) when it is stored
// and the instance that runs the run takes it at its next lease renewal.
type confirmResponse struct {
	OK     bool   `json:"ok"`
	RunID  string `json:"runId"`
	Status string `json:"status"`
}

func (a *API) answerConfirmation(w http.ResponseWriter, r *http.Request) (string, instanceai.ControlOutcome, error) {
	id := mux.Vars(r)["requestId"]
	if !requestIDPattern.MatchString(id) {
		return "", "", httpjson.NewError(http.StatusBadRequest, "invalid_request_id", "requestId", "requestId is not a valid id")
	}
	var body confirmBody
	if err := httpjson.Decode(w, r, a.cfg.MaxBody, &body); err != nil {
		return "", "", err
	}
	ans, err := body.answer()
	if err != nil {
		return "", "", err
	}
	runID, outcome, err := a.core.Answer(r.Context(), auth.UserFrom(r.Context()), id, ans)
	var expired *instanceai.ConfirmationExpiredError
	switch {
	case errors.Is(err, instanceai.ErrNotFound):
		return "", "", httpjson.NewError(http.StatusNotFound, "confirmation_not_found", "requestId", "confirmation %q does not exist", id)
	case errors.Is(err, instanceai.ErrAlreadyAnswered):
		return "", "", httpjson.NewError(http.StatusConflict, "already_answered", "requestId", "confirmation %q was already answered", id)
	case errors.As(err, &expired):
		// An upstream AG-UI interrupt past its expiresAt, refused as the
		// AG-UI resume refuses it (the upstream would): deny it to go on.
		return "", "", httpjson.NewError(http.StatusConflict, "confirmation_expired", "requestId",
			"confirmation %q stands for an interrupt that expired at %s: it can only be denied (approved: false)", id, expired.At)
	case errors.Is(err, instanceai.ErrConfirmationClosed):
		return "", "", httpjson.NewError(http.StatusConflict, "confirmation_closed", "requestId",
			"confirmation %q is no longer awaited: its run ended before an answer arrived", id)
	}
	return runID, outcome, err
}

func (a *API) status(w http.ResponseWriter, r *http.Request) {
	t, err := a.ownedThread(r)
	if err != nil {
		httpjson.WriteError(w, err)
		return
	}
	httpjson.Write(w, http.StatusOK, a.core.Status(r.Context(), t.ID))
}
