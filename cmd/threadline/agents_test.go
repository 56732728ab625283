package main

import (
	"bytes"
	"context"
	"reflect"
	"strings"
	"testing"

	"github.com/threadline/threadline/agent/n8n"
)

func TestWebhookList(t *testing.T) {
	env := map[string]string{
		"AGENT_1_URL": "http://n8n:5678/webhook/support", "AGENT_1_NAME": "support",
		"AGENT_2_URL": "http://n8n:5678/webhook/sales",
		"AGENT_4_URL": "http://n8n:5678/webhook/after-a-gap",
	}
	getenv := func(k string) string { return env[k] }

	got, err := webhooks("", getenv)
	want := []n8n.Webhook{{Name: "support", URL: "http://n8n:5678/webhook/support"}, {Name: "agent2", URL: "http://n8n:5678/webhook/sales"}}
	if err != nil || !reflect.DeepEqual(got, want) {
		t.Fatalf("from AGENT_<N>_URL: %v %+v", err, got)
	}
	got, err = webhooks(" a = http://x/webhook/a , http://x/webhook/b", getenv)
	want = []n8n.Webhook{{Name: "a", URL: "http://x/webhook/a"}, {Name: "agent2", URL: "http://x/webhook/b"}}
	if err != nil || !reflect.DeepEqual(got, want) {
		t.Fatalf("from the flag: %v %+v", err, got)
	}
	if _, err := webhooks("a=", getenv); err == nil || !strings.Contains(err.Error(), "want name=url") {
		t.Fatalf("empty url: %v", err)
	}
	if _, err := webhooks("", func(string) string { return "" }); err == nil || !strings.Contains(err.Error(), "AGENT_1_URL") {
		t.Fatalf("no webhooks: %v", err)
	}
}

func TestWebhookHeader(t *testing.T) {
	h, err := headerFlag("n8n-webhook-header", "x-api-key: s3cret value")
	if err != nil || h.Get("X-Api-Key") != "s3cret value" {
		t.Fatalf("header: %v %v", err, h)
	}
	if h, err := headerFlag("n8n-webhook-header", ""); h != nil || err != nil {
		t.Fatalf("no header: %v %v", h, err)
	}
	// The value is a secret: errors never repeat it.
	for _, bad := range []string{"s3cretnovalue", ": s3cret", "two words: s3cret"} {
		_, err := headerFlag("n8n-webhook-header", bad)
		if err == nil || strings.Contains(err.Error(), "s3cret") {
			t.Fatalf("%q: %v", bad, err)
		}
	}
}

func TestAgentConfigErrors(t *testing.T) {
	t.Setenv("OPENAI_API_KEY", "")
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"-agent", "openai"}, "-openai-model"},
		{[]string{"-agent", "openai", "-openai-model", "m", "-openai-base-url", "localhost:1234"}, "BaseURL"},
		{[]string{"-agent", "openai", "-openai-model", "m", "-n8n-api-url", "http://n8n:5678"}, "-n8n-api-key"},
		{[]string{"-agent", "openai", "-openai-model", "m", "-openai-request-options", "temperature=1"}, "RequestOptions"},
		{[]string{"-agent", "n8n", "-n8n-webhooks", "a=ftp://x"}, "Webhooks[0]"},
		{[]string{"-agent", "n8n", "-n8n-webhooks", "a=http://x,a=http://y"}, "unique"},
		{[]string{"-agent", "n8n", "-n8n-webhooks", "a=http://x", "-n8n-webhook-header", "bad"}, "-n8n-webhook-header"},
		{[]string{"-agent", "agui"}, "--agui-agents name=url"},
		{[]string{"-agent", "agui", "-agui-agents", "a="}, "--agui-agents entry 1"},
		{[]string{"-agent", "agui", "-agui-agents", "a=localhost:8000/agent"}, "Upstreams[0].URL"},
		{[]string{"-agent", "agui", "-agui-agents", "a=http://x,a=http://y"}, "unique"},
		{[]string{"-agent", "agui", "-agui-agents", "a=http://x", "-agui-header", "Authorization Bearer secret"}, "--agui-header"},
		{[]string{"-copilotkit-path", "copilotkit"}, "--copilotkit-path"},
		{[]string{"-copilotkit-path", "/"}, "--copilotkit-path"},
	} {
		args := append([]string{"serve", "-store", "memory", "-addr", "127.0.0.1:0"}, c.args...)
		err := run(context.Background(), args, &bytes.Buffer{}, &bytes.Buffer{})
		if exitCode(err) != 2 || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v: %v (exit %d), want a usage error mentioning %q", c.args, err, exitCode(err), c.want)
		}
	}
}

func TestN8NCaptureFlag(t *testing.T) {
	f, c := serveFlags(&bytes.Buffer{})
	if err := f.Parse(nil); err != nil || !c.agents.n8nCapture {
		t.Fatalf("default: capture %v, %v; want on", c.agents.n8nCapture, err)
	}
	f, c = serveFlags(&bytes.Buffer{})
	if err := f.Parse([]string{"--n8n-capture=false"}); err != nil || c.agents.n8nCapture {
		t.Fatalf("--n8n-capture=false: capture %v, %v; want off", c.agents.n8nCapture, err)
	}
	t.Setenv("THREADLINE_N8N_CAPTURE", "false")
	f, c = serveFlags(&bytes.Buffer{})
	if err := f.Parse(nil); err != nil || c.agents.n8nCapture {
		t.Fatalf("THREADLINE_N8N_CAPTURE=false: capture %v, %v; want off", c.agents.n8nCapture, err)
	}
}
