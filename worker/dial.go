package worker

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.temporal.io/sdk/client"
	"go.uber.org/zap"
)

// EnvTemporalConnectWait is how long a worker or `oncerun serve` keeps
// trying to reach Temporal at start (a server that restarts, a deploy that
// starts both at once) before it gives up.
const EnvTemporalConnectWait = "TEMPORAL_CONNECT_WAIT"

// DefaultTemporalConnectWait is the default of EnvTemporalConnectWait.
const DefaultTemporalConnectWait = time.Minute

// DialTemporal connects to Temporal, trying again with backoff (0.5 s,
// doubling to 5 s) for up to wait (DefaultTemporalConnectWait when zero; a
// negative wait tries once). Each failed try is logged.
func DialTemporal(ctx context.Context, opts client.Options, wait time.Duration, log *zap.Logger) (client.Client, error) {
	if wait == 0 {
		wait = DefaultTemporalConnectWait
	}
	deadline := time.Now().Add(wait)
	backoff := 500 * time.Millisecond
	for tries := 1; ; tries++ {
		c, err := client.DialContext(ctx, opts)
		if err == nil {
			if tries > 1 {
				log.Info("connected to Temporal", zap.String("temporal", opts.HostPort), zap.Int("tries", tries))
			}
			return c, nil
		}
		if wait < 0 || time.Now().Add(backoff).After(deadline) || ctx.Err() != nil {
			return nil, fmt.Errorf("connect to Temporal at %s (%d tries in %s; %s waits longer): %w",
				opts.HostPort, tries, time.Since(deadline.Add(-wait)).Round(time.Millisecond), EnvTemporalConnectWait, err)
		}
		log.Warn("Temporal is not reachable yet; trying again", zap.String("temporal", opts.HostPort),
			zap.Duration("in", backoff), zap.Error(err))
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("connect to Temporal at %s: %w", opts.HostPort, errors.Join(err, ctx.Err()))
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, 5*time.Second)
	}
}
