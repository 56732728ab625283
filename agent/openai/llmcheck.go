package openai

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/threadline/threadline/instanceai"
	"github.com/threadline/threadline/workflow"
)

// CheckLLM is the builder's model check (op.LLMChecker): the probe of
// /llm/health (the model list, within HealthTimeout), nil when the server
// answers and lists the model, else the seed's llm_service ErrorDetail
// saying what is wrong and what to do. A server whose model list cannot be
// read as a list is taken at its word: it answered.
func (a *Agent) CheckLLM(ctx context.Context) *workflow.ErrorDetail {
	models, parsed, err := a.listModels(ctx, a.cfg.HealthTimeout)
	if err != nil {
		var pe *probeError
		if !errors.As(err, &pe) {
			return a.llmDetail(CodeConnectionFailed, err.Error(), a.scrub(err.Error()), nil)
		}
		code := pe.cause
		if code == CodeUpstreamError && pe.status >= 500 && crashed(pe.body) {
			code = codeCrashed
		}
		return a.llmDetail(code, pe.msg, pe.details, nil)
	}
	if parsed && !hasModel(models, a.cfg.Model) {
		msg := fmt.Sprintf("The LLM service at %s is running but does not offer the model %q.", a.cfg.BaseURL, a.cfg.Model)
		return a.llmDetail(CodeModelNotFound, msg, fmt.Sprintf("GET %s lists %d model(s): %s", a.modelsURL, len(models), strings.Join(models, ", ")), models)
	}
	return nil
}

// codeCrashed is a failed answer whose words say the model process died
// (killed, out of memory): a cause of its own in the builder's guidance.
const codeCrashed = "crashed"

// crashed reports whether an error body says the model process died or
// ran out of memory: Ollama's "model requires more system memory (…)
// than is available" and "llama runner process has terminated: signal:
// killed", LM Studio's "The model has crashed without additional
// information. (Exit code: …)", or an exit code 137 (SIGKILL, usually the
// OOM killer).
func crashed(body string) bool {
	b := strings.ToLower(body)
	return strings.Contains(b, "memory") || strings.Contains(b, "killed") || strings.Contains(b, "crash") ||
		strings.Contains(b, "terminated") || (strings.Contains(b, "exit") && strings.Contains(b, "137"))
}

// providerDetail turns a failed model call of the builder into the seed's
// llm_service ErrorDetail.
func (a *Agent) providerDetail(err error) *workflow.ErrorDetail {
	var pe *instanceai.ProviderError
	if !errors.As(err, &pe) {
		if errors.Is(err, context.DeadlineExceeded) {
			return a.llmDetail(CodeTimeout, "The model did not finish the workflow within the operation's time limit.", err.Error(), nil)
		}
		return a.llmDetail("", err.Error(), a.scrub(err.Error()), nil)
	}
	code := pe.Code
	if code == CodeUpstreamError && crashed(pe.Details) {
		code = codeCrashed
	}
	details := pe.Details
	if pe.StatusCode != 0 && !strings.Contains(details, "HTTP") {
		details = fmt.Sprintf("HTTP %d: %s", pe.StatusCode, details)
	}
	return a.llmDetail(code, pe.Message, details, nil)
}

// llmDetail is the seed's llm_service ErrorDetail for a cause (one of the
// Code constants, codeCrashed, or "" for anything else). message says what
// happened; models, when known, are offered as the names to use.
func (a *Agent) llmDetail(code, message, details string, models []string) *workflow.ErrorDetail {
	where := a.cfg.BaseURL
	d := &workflow.ErrorDetail{Category: workflow.CategoryLLMService, Severity: workflow.SeverityError,
		Message: a.scrub(message), TechnicalDetails: a.scrub(details)}
	switch code {
	case CodeConnectionFailed:
		d.Title = "LLM Service Not Running"
		d.UserGuidance = fmt.Sprintf("Nothing answers at %s. Start your LLM service (LM Studio, Ollama, vLLM, llama.cpp) and check that it listens at that address.", where)
		d.FixSuggestions = []string{"Start your LLM service (e.g. LM Studio's local server, `ollama serve`)",
			fmt.Sprintf("Check the base URL %s: host, port and the /v1 API root", where),
			"Check that no firewall or container network blocks the port"}
	case CodeModelNotFound:
		d.Title = "Model Not Available"
		d.UserGuidance = fmt.Sprintf("The LLM service runs, but the model %q is not loaded or not installed there. Load or pull it, or configure a model the service offers.", a.cfg.Model)
		d.FixSuggestions = []string{fmt.Sprintf("Load or pull the model %q on the service (e.g. `ollama pull %s`, or load it in LM Studio)", a.cfg.Model, a.cfg.Model),
			"Check the spelling of the configured model name"}
		if len(models) > 0 {
			shown := models
			if len(shown) > 10 {
				shown = append(shown[:10:10], "…")
			}
			d.FixSuggestions = append(d.FixSuggestions, "Use one of the models the service lists: "+strings.Join(shown, ", "))
		}
	case codeCrashed:
		d.Title = "LLM Service Crashed"
		d.UserGuidance = "The AI service crashed or ran out of memory. Check system resources and restart your LLM service."
		d.FixSuggestions = []string{"Restart your LLM service (e.g. LM Studio, Ollama)",
			"Check available system memory and close other applications",
			"Consider using a smaller model if memory is limited",
			"Verify your LLM service configuration (context size, GPU layers)"}
	case CodeTimeout:
		d.Title = "LLM Service Timed Out"
		d.UserGuidance = "The LLM service did not answer in time. It may be loading the model or be overloaded; local models can take 20-45 seconds for complex workflows."
		d.FixSuggestions = []string{"Wait until the model has loaded, then try again",
			"Use a smaller or faster model", "Raise the builder's operation timeout (--builder-timeout)"}
	case CodeUnauthorized:
		d.Title = "LLM Service Refused the Request"
		d.UserGuidance = "The LLM service refused the API key. Configure a valid key for the agent."
		if a.cfg.APIKey == "" {
			d.UserGuidance = "The LLM service needs an API key and none is configured. Configure one for the agent."
		}
		d.FixSuggestions = []string{"Check the API key configured for the agent",
			"Check that the key may use the configured model", "Check the base URL points at the service the key is for"}
	case CodeRateLimited:
		d.Title = "LLM Service Rate Limited"
		d.UserGuidance = "The LLM service is limiting requests. Wait a moment and try again."
		d.FixSuggestions = []string{"Wait a minute and try again", "Check the account's quota"}
	case CodeContextLength, CodeMaxTokens:
		d.Title = "Workflow Too Large for the Model"
		d.UserGuidance = "The workflow or the answer does not fit the model's context or output limit."
		d.FixSuggestions = []string{"Describe a smaller workflow, or split it into parts",
			"Use a model with a larger context, or raise its max tokens", "Raise the context size of the local server"}
	case CodeNotFound:
		d.Title = "LLM Endpoint Not Found"
		d.UserGuidance = fmt.Sprintf("%s does not look like an OpenAI-compatible API root.", where)
		d.FixSuggestions = []string{"Make the base URL end at the API root, e.g. http://localhost:1234/v1 or http://localhost:11434/v1"}
	default:
		d.Title = "LLM Service Error"
		d.UserGuidance = "The LLM service failed to answer. Try again; if it keeps failing, check the service's logs."
		d.FixSuggestions = []string{"Try again in a minute", "Check the LLM service's logs", "Restart the LLM service"}
	}
	return d
}
