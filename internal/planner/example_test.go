package planner_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"

	"github.com/oncerun/oncerun/internal/planner"
)

// ExampleNewOpenAI asks a local OpenAI-compatible endpoint, such as Ollama,
// for a run's next calls. A stand-in server plays the model here.
func ExampleNewOpenAI() {
	model := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprint(w, `{"choices":[{"message":{"role":"assistant","tool_calls":[
			{"id":"c1","type":"function","function":{"name":"create_order","arguments":"{\"sku\":\"A1\"}"}}]}}]}`)
	}))
	defer model.Close()

	p, err := planner.NewOpenAI(planner.OpenAIConfig{
		BaseURL: model.URL + "/v1", // for Ollama: "http://localhost:11434/v1"
		Model:   "llama3.1",        // no APIKey: Ollama needs none
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	proposal, err := p.Next(context.Background(), planner.Request{
		Tenant: "acme",
		RunID:  "run-42",
		Goal:   "order one A1",
		Tools: []planner.ToolSpec{{
			Name:        "create_order",
			Description: "Create an order for one item.",
			Schema:      json.RawMessage(`{"type":"object","properties":{"sku":{"type":"string"}}}`),
		}},
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	for _, c := range proposal.Calls {
		fmt.Println(c.Tool, string(c.Args))
	}
	// Output: create_order {"sku":"A1"}
}
