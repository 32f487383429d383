package runs

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestUpdatesToOneRunAreBoundedAndOtherRunsDoNotWait(t *testing.T) {
	t.Parallel()
	var s = runSlots{runs: map[string]*runSlot{}}
	var now, most atomic.Int64
	var wg sync.WaitGroup
	for range 40 {
		wg.Go(func() {
			release, err := s.acquire(t.Context(), "run-a")
			if !assert.NoError(t, err) {
				return
			}
			n := now.Add(1)
			for {
				m := most.Load()
				if n <= m || most.CompareAndSwap(m, n) {
					break
				}
			}
			time.Sleep(5 * time.Millisecond)
			now.Add(-1)
			release()
		})
	}
	// While run-a's slots are taken, another run gets one at once.
	release, err := s.acquire(t.Context(), "run-b")
	require.NoError(t, err)
	release()
	wg.Wait()
	assert.LessOrEqual(t, most.Load(), int64(MaxUpdatesPerRun))
	assert.Greater(t, most.Load(), int64(1), "updates to one run still go several at a time")
	assert.Empty(t, s.runs, "no slot is kept for a run nobody sends to")
}

func TestAWaitForASlotEndsWithItsContext(t *testing.T) {
	t.Parallel()
	var s = runSlots{runs: map[string]*runSlot{}}
	var held []func()
	for range MaxUpdatesPerRun {
		release, err := s.acquire(t.Context(), "run-a")
		require.NoError(t, err)
		held = append(held, release)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Millisecond)
	defer cancel()
	_, err := s.acquire(ctx, "run-a")
	require.ErrorIs(t, err, context.DeadlineExceeded)
	for _, r := range held {
		r()
	}
	assert.Empty(t, s.runs)
}
