package mcptools_test

import (
	"encoding/json"
	"reflect"
	"testing"

	"github.com/threadline/threadline/agent/tools/mcptools"
	"github.com/threadline/threadline/instanceai"
)

// elicitSchema is a part of server-everything's trigger-elicitation-request
// schema (dist/tools/trigger-elicitation-request.js, 2026.8.31).
const elicitSchema = `{"type":"object","required":["name"],"properties":{
  "name":{"title":"String","type":"string","description":"Your full, legal name"},
  "check":{"title":"Boolean","type":"boolean","description":"Agree to the terms and conditions"},
  "integer":{"title":"Integer","type":"integer","minimum":1,"maximum":100,"default":42},
  "friend":{"type":"string","title":"Friend","enum":["Monica","Rachel"],"default":"Monica"},
  "hero":{"type":"string","title":"Hero","oneOf":[{"const":"hero-1","title":"Superman"},{"const":"hero-2","title":"Green Lantern"}]},
  "fish":{"type":"array","title":"Fish","items":{"anyOf":[{"const":"fish-1","title":"Tuna"},{"const":"fish-2","title":"Salmon"}]}},
  "pet":{"type":"string","title":"Pet","enum":["pet-1","pet-2"],"enumNames":["Cats","Dogs"]}
}}`

func schema(t *testing.T, s string) any {
	var v any
	if err := json.Unmarshal([]byte(s), &v); err != nil {
		t.Fatal(err)
	}
	return v
}

func TestMCPElicitationForm(t *testing.T) {
	qs, text, err := mcptools.ElicitQuestions(schema(t, elicitSchema))
	if err != nil || text != "" {
		t.Fatal(err, text)
	}
	var got []string
	for _, q := range qs {
		got = append(got, q.ID+":"+q.Type)
	}
	want := []string{"name:text", "check:single", "fish:multi", "friend:single", "hero:single", "integer:text", "pet:single"}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("questions %q, want %q", got, want)
	}
	if q := qs[0]; q.Question != "String: Your full, legal name (required)" {
		t.Errorf("name question %q", q.Question)
	}
	if o := qs[4].Options; !reflect.DeepEqual(o, []string{"Superman", "Green Lantern"}) {
		t.Errorf("hero options %q", o)
	}
	if o := qs[6].Options; !reflect.DeepEqual(o, []string{"Cats", "Dogs"}) {
		t.Errorf("pet options %q", o)
	}

	res, err := mcptools.ElicitAnswer(schema(t, elicitSchema), instanceai.Answer{Kind: instanceai.AnswerQuestions, Approved: true,
		Answers: []instanceai.QuestionAnswer{
			{QuestionID: "name", CustomText: "Ada"},
			{QuestionID: "check", SelectedOptions: []string{"Yes"}},
			{QuestionID: "fish", SelectedOptions: []string{"Tuna", "Salmon"}},
			{QuestionID: "hero", SelectedOptions: []string{"Green Lantern"}},
			{QuestionID: "integer", CustomText: "7"},
			{QuestionID: "pet", SelectedOptions: []string{"Dogs"}},
			{QuestionID: "friend", Skipped: true},
		}})
	if err != nil {
		t.Fatal(err)
	}
	wantContent := map[string]any{"name": "Ada", "check": true, "fish": []any{"fish-1", "fish-2"}, "hero": "hero-2", "integer": int64(7), "pet": "pet-2"}
	if res.Action != "accept" || !reflect.DeepEqual(res.Content, wantContent) {
		t.Errorf("result %s %#v", res.Action, res.Content)
	}

	for name, a := range map[string]instanceai.Answer{
		"denied":           {Approved: false},
		"required missing": {Kind: instanceai.AnswerQuestions, Approved: true, Answers: []instanceai.QuestionAnswer{{QuestionID: "check", SelectedOptions: []string{"No"}}}},
		"not a number":     {Kind: instanceai.AnswerQuestions, Approved: true, Answers: []instanceai.QuestionAnswer{{QuestionID: "name", CustomText: "A"}, {QuestionID: "integer", CustomText: "many"}}},
	} {
		res, _ := mcptools.ElicitAnswer(schema(t, elicitSchema), a)
		if res.Action != "decline" {
			t.Errorf("%s: action %s", name, res.Action)
		}
	}

	// One free-text field is asked as text input.
	one := `{"type":"object","properties":{"reason":{"type":"string","description":"Why?"}}}`
	if _, text, _ := mcptools.ElicitQuestions(schema(t, one)); text != "reason" {
		t.Errorf("text field %q", text)
	}
	res, _ = mcptools.ElicitAnswer(schema(t, one), instanceai.Answer{Kind: instanceai.AnswerText, Approved: true, UserInput: "because"})
	if res.Action != "accept" || res.Content["reason"] != "because" {
		t.Errorf("text result %+v", res)
	}
}
