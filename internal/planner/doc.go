// Package planner proposes an agent run's next tool calls.
//
// A [Planner] is asked once per turn, from an activity, with the run's goal
// and everything that happened so far; its answer is recorded in the run's
// history by Temporal, so a replay never asks it again.
//
// # Planners
//
//   - [Script] returns the calls listed in the run's plan, one per turn, in
//     order: for demos, tests and pipelines without a language model.
//   - [OpenAI] asks any OpenAI-compatible chat-completions endpoint with tool
//     calling (OpenAI, Ollama, vLLM), describing each tool by its JSON Schema.
package planner
