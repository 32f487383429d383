package mcp

import (
	"context"
	"io"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// scripted is a connection whose server sends msgs, in order.
type scripted struct {
	msgs []jsonrpc.Message
}

func (s *scripted) Read(context.Context) (jsonrpc.Message, error) {
	if len(s.msgs) == 0 {
		return nil, io.EOF
	}
	m := s.msgs[0]
	s.msgs = s.msgs[1:]
	return m, nil
}
func (s *scripted) Write(context.Context, jsonrpc.Message) error { return nil }
func (s *scripted) Close() error                                 { return nil }
func (s *scripted) SessionID() string                            { return "" }

func response(t *testing.T, id any) *jsonrpc.Response {
	t.Helper()
	rid, err := jsonrpc.MakeID(id)
	require.NoError(t, err)
	return &jsonrpc.Response{ID: rid, Result: []byte(`{}`)}
}

// An answer to one of oncerun's own requests reaches its waiter once; a
// second answer to the same id, and a late one whose waiter has gone, are
// dropped without blocking the connection or reaching the SDK, which gets
// its own answers.
func TestOncerunsOwnAnswersAreTakenOnceAndNeverBlock(t *testing.T) {
	conn := &scripted{msgs: []jsonrpc.Message{
		response(t, "oncerun-1"), response(t, "oncerun-1"), response(t, "oncerun-7"), response(t, float64(5)),
	}}
	c := &keyConn{Connection: conn, srv: &server{}}
	answer := make(chan *jsonrpc.Response, 1)
	c.waiting.Store("oncerun-1", answer)

	got := make(chan jsonrpc.Message, 1)
	go func() {
		m, err := c.Read(context.Background())
		assert.NoError(t, err)
		got <- m
	}()
	select {
	case m := <-got:
		r, ok := m.(*jsonrpc.Response)
		require.True(t, ok)
		assert.EqualValues(t, 5, r.ID.Raw(), "the SDK's own answer passes")
	case <-time.After(10 * time.Second):
		t.Fatal("the connection blocked on a second answer to oncerun's request")
	}
	require.Len(t, answer, 1)
	assert.Equal(t, "oncerun-1", (<-answer).ID.Raw())
	_, waiting := c.waiting.Load("oncerun-1")
	assert.False(t, waiting)
}

// A live question that came on a call's own answer stream belongs to that
// call, whatever task it names: a server's claim never outweighs what the
// transport says. A question on no call's stream goes to the call that
// follows the task it names; with neither, to the only call in flight.
func TestTheStreamAQuestionCameOnOutweighsTheTaskItNames(t *testing.T) {
	s := &server{}
	var others []*liveCall
	for range 20 {
		lc, end := s.beginLive(context.Background(), "ship", nil)
		t.Cleanup(end)
		lc.task.Store(&taskInfo{TaskID: "task-1"})
		others = append(others, lc)
	}
	streamed, end := s.beginLive(context.Background(), "ship", nil)
	t.Cleanup(end)
	streamed.sawRequest("7")

	assert.Same(t, streamed, s.callFor("7", "task-1"))
	assert.Contains(t, others, s.callFor("8", "task-1"))
	assert.Nil(t, s.callFor("8", "task-2"), "two calls and more in flight: nothing tells which")
}
