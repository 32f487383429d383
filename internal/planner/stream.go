package planner

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"mime"
	"net/http"
	"sort"
	"strings"
)

// streamed reports whether resp is a stream of Server-Sent Events, as an
// endpoint asked with stream: true answers.
func streamed(resp *http.Response) bool {
	mt, _, err := mime.ParseMediaType(resp.Header.Get("Content-Type"))
	return err == nil && mt == "text/event-stream"
}

// streamChunk is one event of a streamed chat completion.
type streamChunk struct {
	Choices []struct {
		Index int `json:"index"`
		Delta struct {
			Content   *string `json:"content"`
			ToolCalls []struct {
				Index    int    `json:"index"`
				ID       string `json:"id"`
				Type     string `json:"type"`
				Function struct {
					Name      string `json:"name"`
					Arguments string `json:"arguments"`
				} `json:"function"`
			} `json:"tool_calls"`
		} `json:"delta"`
		FinishReason *string `json:"finish_reason"`
	} `json:"choices"`
	Usage json.RawMessage `json:"usage"`
}

// readStream reads a streamed chat completion from body, handing each
// piece of the first choice's text to onText as it comes, and returns the
// answer whole, in the form of an answer that was not streamed, for
// parseResponse: the choice's text, its tool calls with their arguments
// joined, its finish reason, and the usage the last event reports.
func readStream(body io.Reader, onText func(string)) ([]byte, error) {
	sc := bufio.NewScanner(body)
	sc.Buffer(make([]byte, 64<<10), maxResponseBytes)
	var (
		content  strings.Builder
		sawText  bool
		calls    = map[int]*chatToolCall{}
		finish   string
		usage    json.RawMessage
		total    int
		finished bool
	)
	for sc.Scan() {
		line := sc.Text()
		total += len(line)
		if total > maxResponseBytes {
			return nil, fmt.Errorf("the streamed answer exceeds %d bytes", maxResponseBytes)
		}
		data, ok := strings.CutPrefix(line, "data:")
		if !ok {
			continue
		}
		data = strings.TrimSpace(data)
		if data == "[DONE]" {
			finished = true
			break
		}
		var ch streamChunk
		if err := json.Unmarshal([]byte(data), &ch); err != nil {
			return nil, fmt.Errorf("decode a streamed event %s: %w", excerpt([]byte(data)), err)
		}
		if len(ch.Usage) > 0 && string(ch.Usage) != "null" {
			usage = ch.Usage
		}
		for _, c := range ch.Choices {
			if c.Index != 0 {
				continue
			}
			if t := c.Delta.Content; t != nil && *t != "" {
				sawText = true
				content.WriteString(*t)
				if onText != nil {
					onText(*t)
				}
			}
			for _, d := range c.Delta.ToolCalls {
				tc := calls[d.Index]
				if tc == nil {
					tc = &chatToolCall{Type: "function"}
					calls[d.Index] = tc
				}
				if d.ID != "" {
					tc.ID = d.ID
				}
				if d.Function.Name != "" {
					tc.Function.Name += d.Function.Name
				}
				tc.Function.Arguments += d.Function.Arguments
			}
			if c.FinishReason != nil && *c.FinishReason != "" {
				finish = *c.FinishReason
			}
		}
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	if !finished && finish == "" {
		return nil, fmt.Errorf("the stream ended before the answer did")
	}
	idx := make([]int, 0, len(calls))
	for i := range calls {
		idx = append(idx, i)
	}
	sort.Ints(idx)
	type message struct {
		Content   *string        `json:"content"`
		ToolCalls []chatToolCall `json:"tool_calls,omitempty"`
	}
	type choice struct {
		Message      message `json:"message"`
		FinishReason string  `json:"finish_reason"`
	}
	whole := struct {
		Choices []choice        `json:"choices"`
		Usage   json.RawMessage `json:"usage,omitempty"`
	}{Usage: usage}
	m := message{}
	if sawText {
		s := content.String()
		m.Content = &s
	}
	for _, i := range idx {
		m.ToolCalls = append(m.ToolCalls, *calls[i])
	}
	whole.Choices = []choice{{Message: m, FinishReason: finish}}
	return json.Marshal(whole)
}
