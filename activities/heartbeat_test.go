package activities_test

import (
	"context"
	"encoding/json"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/interceptor"
	"go.temporal.io/sdk/worker"

	"github.com/oncerun/oncerun/activities"
	"github.com/oncerun/oncerun/tools"
)

// A step heartbeats while its tool runs, whatever its class, so that the
// workflow's short heartbeat timeout never cuts off a slow but live call.
func TestRunToolHeartbeatsWhileTheToolRuns(t *testing.T) {
	t.Parallel()
	slow := tools.Tool{
		Name: "slow_lookup", Class: tools.ClassRead,
		Schema: json.RawMessage(`{"type":"object"}`),
		Run: func(ctx context.Context, _ tools.Call) (any, error) {
			select {
			case <-time.After(3*activities.HeartbeatEvery + activities.HeartbeatEvery/2):
			case <-ctx.Done():
			}
			return map[string]bool{"ok": true}, nil
		},
	}
	f := setup(t, slow)
	env := f.env()
	beats := &heartbeats{}
	env.SetWorkerOptions(worker.Options{Interceptors: []interceptor.WorkerInterceptor{beats}})
	_, err := env.ExecuteActivity(f.acts.RunTool, input(t, 1, "slow_lookup", `{}`))
	require.NoError(t, err)
	assert.GreaterOrEqual(t, beats.n.Load(), int32(3), "one heartbeat every %s", activities.HeartbeatEvery)
}

// heartbeats counts the heartbeats activities record.
type heartbeats struct {
	interceptor.WorkerInterceptorBase
	n atomic.Int32
}

func (h *heartbeats) InterceptActivity(ctx context.Context, next interceptor.ActivityInboundInterceptor) interceptor.ActivityInboundInterceptor {
	return &heartbeatInbound{ActivityInboundInterceptorBase: interceptor.ActivityInboundInterceptorBase{Next: next}, h: h}
}

type heartbeatInbound struct {
	interceptor.ActivityInboundInterceptorBase
	h *heartbeats
}

func (i *heartbeatInbound) Init(outbound interceptor.ActivityOutboundInterceptor) error {
	return i.Next.Init(&heartbeatOutbound{ActivityOutboundInterceptorBase: interceptor.ActivityOutboundInterceptorBase{Next: outbound}, h: i.h})
}

type heartbeatOutbound struct {
	interceptor.ActivityOutboundInterceptorBase
	h *heartbeats
}

func (o *heartbeatOutbound) RecordHeartbeat(ctx context.Context, details ...any) {
	o.h.n.Add(1)
	o.Next.RecordHeartbeat(ctx, details...)
}
