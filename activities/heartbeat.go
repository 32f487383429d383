package activities

import (
	"context"
	"time"

	"go.temporal.io/sdk/activity"
)

// HeartbeatEvery is how often a running step, planning turn or delivery
// heartbeats. The workflow gives them a heartbeat timeout a few times
// longer, so that the attempt of a worker that died is retried within
// seconds, while a slow but live one keeps its whole StartToClose timeout.
const HeartbeatEvery = 2 * time.Second

// keepAlive heartbeats every HeartbeatEvery until stop is called, when ctx
// is an activity's; otherwise, and for a local activity, which has no
// heartbeat (its worker holds the workflow task), it does nothing.
func keepAlive(ctx context.Context) (stop func()) {
	if !activity.IsActivity(ctx) || isLocal(ctx) {
		return func() {}
	}
	done := make(chan struct{})
	finished := make(chan struct{})
	go func() {
		defer close(finished)
		t := time.NewTicker(HeartbeatEvery)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-ctx.Done():
				return
			case <-t.C:
				activity.RecordHeartbeat(ctx)
			}
		}
	}()
	return func() {
		close(done)
		<-finished
	}
}

// isLocal reports whether ctx is a local activity's.
func isLocal(ctx context.Context) bool {
	return activity.IsActivity(ctx) && activity.GetInfo(ctx).IsLocalActivity
}
