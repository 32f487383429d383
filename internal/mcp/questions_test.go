package mcp_test

import (
	"context"
	"encoding/json"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/oncerun/oncerun/internal/mcp"
	"github.com/oncerun/oncerun/internal/questions"
	"github.com/oncerun/oncerun/tools"
)

type shirtOrder struct {
	Ordered string `json:"ordered"`
	State   string `json:"state"`
	Key     string `json:"key"`
}

// accept answers the shirt's question with size.
func accept(size string) questions.Answers {
	return questions.Answers{"size": {Action: questions.ActionAccept, Content: json.RawMessage(`{"size":"` + size + `"}`)}}
}

// A server of the 2026-07-28 protocol (the SDK's own server over stdio)
// answers a call with its question (an input-required result): the call
// completed nothing and says what was asked, with the schema of the answer
// and the request state to send back; sent again with a person's answer
// and that state, under the same key, it completes.
func TestAServersQuestionInItsAnswerIsSentBackAnswered(t *testing.T) {
	t.Parallel()
	cfg := stdioConfig(t, "local", asking)
	cfg.Tools = map[string]mcp.ToolConfig{"order_shirt": {}}
	cfg.Questions = mcp.Questions{AnswerBy: []string{"dana@acme"}, Wait: mcp.Duration(48 * time.Hour)}
	d := load(t, cfg)
	tool := toolOf(t, d, "local_order_shirt")
	call := callOf(t, tool.Name, 1, `{}`)

	_, err := tool.Run(context.Background(), call)
	require.Error(t, err)
	var ae *questions.AskedError
	require.ErrorAs(t, err, &ae, "the call says what the server asked")
	assert.ErrorIs(t, err, tools.ErrNotApplied, "the server completed nothing")
	assert.False(t, permanent(err), "answered, the call goes on")
	asked := ae.Asked
	assert.Equal(t, "local", asked.Server)
	require.Len(t, asked.Items, 1)
	it := asked.Items[0]
	assert.Equal(t, "size", it.ID)
	assert.Equal(t, questions.ModeForm, it.Mode)
	assert.Equal(t, "Which size?", it.Message)
	assert.JSONEq(t, `{"type":"object","properties":{"size":{"type":"string","enum":["S","M","L"]}},"required":["size"]}`, string(it.Schema))
	assert.Equal(t, "sized:"+call.Key.String(), asked.State, "the server's request state, to send back")
	assert.Equal(t, []string{"dana@acme"}, asked.AnswerBy, "who may answer, from the configuration")
	assert.Equal(t, 48*time.Hour, asked.Wait)
	require.NoError(t, asked.Validate())

	ctx := questions.WithReply(context.Background(), questions.Reply{Answers: accept("M"), State: asked.State})
	var got shirtOrder
	res, err := tool.Run(ctx, call)
	require.NoError(t, err)
	raw, _ := json.Marshal(res)
	require.NoError(t, json.Unmarshal(raw, &got))
	assert.Equal(t, shirtOrder{Ordered: "M", State: asked.State, Key: call.Key.String()}, got,
		"the answer and the state reached the server, under the step's key")
}

// A declined question goes back to the server as declined: this one then
// answers an error, a definite failure that made nothing.
func TestADeclinedQuestionIsSentBackDeclined(t *testing.T) {
	t.Parallel()
	cfg := stdioConfig(t, "local", asking)
	cfg.Tools = map[string]mcp.ToolConfig{"order_shirt": {}}
	d := load(t, cfg)
	tool := toolOf(t, d, "local_order_shirt")
	call := callOf(t, tool.Name, 1, `{}`)
	ctx := questions.WithReply(context.Background(), questions.Reply{
		Answers: questions.Answers{"size": {Action: questions.ActionDecline}}, State: "sized:" + call.Key.String()})
	_, err := tool.Run(ctx, call)
	require.Error(t, err)
	assert.True(t, permanent(err))
	assert.ErrorIs(t, err, tools.ErrNotApplied)
	assert.Contains(t, err.Error(), "no size, no shirt")
}

// A question that asks for what only a client program gives (a model's
// completion) cannot be put to a person: the call fails for good, saying
// what was asked; and an input-required answer that asks nothing is the
// server saying it is busy, not applied and sent again later.
func TestAQuestionNoPersonCanAnswerFailsTheCall(t *testing.T) {
	t.Parallel()
	s := asked(t)
	s.asksFor.Store(`{"m":{"method":"sampling/createMessage","params":{"messages":[],"maxTokens":10}}}`)
	d := load(t, httpConfig("shop", s.URL, map[string]mcp.ToolConfig{"order_shirt": {}}))
	tool := toolOf(t, d, "shop_order_shirt")
	err := run(t, tool, callOf(t, tool.Name, 1, `{}`), nil)
	require.Error(t, err)
	assert.True(t, permanent(err))
	assert.ErrorIs(t, err, tools.ErrNotApplied)
	assert.Contains(t, err.Error(), `it asked for a model's completion (sampling) ("m"), which oncerun does not give`)

	s.asksFor.Store(`{}`)
	err = run(t, tool, callOf(t, tool.Name, 2, `{}`), nil)
	require.Error(t, err)
	assert.False(t, permanent(err), "a busy server is asked again")
	assert.ErrorIs(t, err, tools.ErrNotApplied)
	assert.Contains(t, err.Error(), "busy")
}

// A server of an earlier protocol (the SDK's server over Streamable HTTP,
// 2025-11-25) asks over the live session, mid-call: the question is put to
// a person through the call (questions.LiveOf), whose own timeout stops
// while the person takes longer than it, and the answer goes back to the
// server, which completes the call.
func TestAServersLiveQuestionIsPutToAPersonThroughTheCall(t *testing.T) {
	t.Parallel()
	s := startHTTP(t, asking)
	d := load(t, httpConfig("shop", s.URL, map[string]mcp.ToolConfig{
		"order_shirt": {Timeout: mcp.Duration(300 * time.Millisecond), Questions: &mcp.Questions{AnswerBy: []string{"sam@acme"}}}}))
	tool := toolOf(t, d, "shop_order_shirt")
	call := callOf(t, tool.Name, 1, `{}`)
	var got []questions.Asked
	ask := func(ctx context.Context, a questions.Asked) (questions.Answers, error) {
		got = append(got, a)
		time.Sleep(time.Second) // longer than the call's timeout
		return questions.Answers{questions.LiveItem: {Action: questions.ActionAccept, Content: json.RawMessage(`{"size":"L"}`)}}, nil
	}
	var order shirtOrder
	require.NoError(t, run(t, tool, call, &order, questions.WithLive(context.Background(), ask)))
	assert.Equal(t, "L", order.Ordered, "the person's answer reached the server")
	assert.Equal(t, call.Key.String(), order.Key)
	require.Len(t, got, 1)
	assert.Equal(t, "shop", got[0].Server)
	assert.Equal(t, []string{"sam@acme"}, got[0].AnswerBy)
	assert.Equal(t, mcp.DefaultLiveWait, got[0].Wait)
	require.Len(t, got[0].Items, 1)
	assert.Equal(t, questions.LiveItem, got[0].Items[0].ID)
	assert.Equal(t, "Which size?", got[0].Items[0].Message)
	assert.Contains(t, string(got[0].Items[0].Schema), `"enum":["S","M","L"]`)
}

// Two calls in flight on one session are each asked their own question:
// each question goes to the call on whose answer stream it came.
func TestLiveQuestionsGoToTheCallThatAskedThem(t *testing.T) {
	t.Parallel()
	s := startHTTP(t, asking)
	d := load(t, httpConfig("shop", s.URL, map[string]mcp.ToolConfig{"order_shirt": {}}))
	tool := toolOf(t, d, "shop_order_shirt")
	type asker struct{ size string }
	var (
		wg     sync.WaitGroup
		both   sync.WaitGroup
		orders [2]shirtOrder
		errs   [2]error
	)
	both.Add(2)
	for i, size := range []string{"S", "L"} {
		wg.Go(func() {
			me := asker{size: size}
			ask := func(ctx context.Context, a questions.Asked) (questions.Answers, error) {
				// Both calls wait here, so that both are in flight when
				// each is asked.
				both.Done()
				both.Wait()
				return questions.Answers{questions.LiveItem: {Action: questions.ActionAccept, Content: json.RawMessage(`{"size":"` + me.size + `"}`)}}, nil
			}
			errs[i] = run(t, tool, callOf(t, tool.Name, int64(i+1), `{}`), &orders[i], questions.WithLive(context.Background(), ask))
		})
	}
	wg.Wait()
	require.NoError(t, errors.Join(errs[:]...))
	assert.Equal(t, "S", orders[0].Ordered)
	assert.Equal(t, "L", orders[1].Ordered)
}

// A live question nobody can be asked (no asker: the CLI, a probe) is
// dismissed: the server is told cancel, and this one then declines the
// order, a definite failure.
func TestALiveQuestionNobodyCanBeAskedIsDismissed(t *testing.T) {
	t.Parallel()
	s := startHTTP(t, asking)
	d := load(t, httpConfig("shop", s.URL, map[string]mcp.ToolConfig{"order_shirt": {}}))
	err := run(t, toolOf(t, d, "shop_order_shirt"), callOf(t, "shop_order_shirt", 1, `{}`), nil)
	require.Error(t, err)
	assert.True(t, permanent(err))
	assert.Contains(t, err.Error(), "no size, no shirt")
	assert.Equal(t, []string{"asked", "declined"}, s.Ledger.ids(), "the server heard cancel, and ordered nothing")
}

// live_wait "0s" declares no elicitation: the server's own SDK then
// cannot ask, and what it made of the call is unknown: not sent again on
// a guess.
func TestWithoutLiveQuestionsTheServerCannotAsk(t *testing.T) {
	t.Parallel()
	s := startHTTP(t, asking)
	off := mcp.Duration(0)
	cfg := httpConfig("shop", s.URL, map[string]mcp.ToolConfig{"order_shirt": {}})
	cfg.Questions.LiveWait = &off
	d := load(t, cfg)
	var calls atomic.Int32
	ask := func(context.Context, questions.Asked) (questions.Answers, error) { calls.Add(1); return nil, nil }
	tool := toolOf(t, d, "shop_order_shirt")
	assert.Zero(t, tool.Timeout, "no wait for a person is added to the attempt (the registry's default applies)")
	err := run(t, tool, callOf(t, tool.Name, 1, `{}`), nil, questions.WithLive(context.Background(), ask))
	require.Error(t, err)
	assert.False(t, permanent(err))
	assert.NotErrorIs(t, err, tools.ErrNotApplied, "the server may have acted before it asked")
	assert.Contains(t, err.Error(), "client does not support elicitation")
	assert.Zero(t, calls.Load(), "nobody was asked")
}

// The questions' configuration is checked with the rest.
func TestTheQuestionsConfigurationIsChecked(t *testing.T) {
	t.Parallel()
	long := mcp.Duration(2 * time.Hour)
	cfg := mcp.Config{Servers: []mcp.ServerConfig{{Name: "shop", Transport: mcp.TransportHTTP, URL: "http://127.0.0.1:1/mcp",
		Questions: mcp.Questions{AnswerBy: []string{"dana@acme", "dana@acme", ""}, Wait: mcp.Duration(-time.Second), LiveWait: &long},
		Tools:     map[string]mcp.ToolConfig{"order": {Questions: &mcp.Questions{Wait: mcp.Duration(15 * 24 * time.Hour)}}}}}}
	err := cfg.Validate()
	require.Error(t, err)
	for _, want := range []string{
		`questions.answer_by[1]: "dana@acme" twice`, "questions.answer_by[2] is empty", "questions.wait -1s: not between 0s and 336h0m0s",
		"questions.live_wait 2h0m0s: not between 0s and 1h0m0s", `tool "order": questions.wait 360h0m0s: not between 0s and 336h0m0s`,
	} {
		assert.Contains(t, err.Error(), want)
	}
}
