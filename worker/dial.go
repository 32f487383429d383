package worker

import (
	"context"
	"time"

	"go.temporal.io/sdk/client"
	"go.uber.org/zap"

	"github.com/oncerun/oncerun/internal/telemetry"
	"github.com/oncerun/oncerun/internal/temporalconn"
)

// defaultTemporalConnectWait is the default of settings.EnvTemporalConnectWait.
const defaultTemporalConnectWait = temporalconn.DefaultConnectWait

// DialTemporal connects to Temporal, trying again with backoff (0.5 s,
// doubling to 5 s) for up to wait (defaultTemporalConnectWait when zero; a
// negative wait tries once) while the server is not reachable. Each failed
// try is logged. A server that refuses us (a failed TLS handshake, a
// missing or wrong API key or client certificate) fails the dial at once
// with what failed and which variables to check.
func DialTemporal(ctx context.Context, opts client.Options, wait time.Duration, log *zap.Logger) (client.Client, error) {
	return temporalconn.Dial(ctx, opts, wait, log)
}

// TemporalClientOptions are the options of cfg's Temporal client:
// cfg.TemporalOptions with cfg's address and namespace, and the SDK's log
// lines going to log.
func (c Config) TemporalClientOptions(log *zap.Logger) client.Options {
	opts := c.TemporalOptions
	opts.HostPort, opts.Namespace = c.TemporalAddress, c.Namespace
	opts.Logger = temporalLogger(log)
	boundTemporal(&opts)
	// Traced while OTEL_* configure tracing; the interceptors serve the
	// client's workers too.
	if ics, err := telemetry.TemporalInterceptors(); err != nil {
		log.Warn("Temporal calls are not traced", zap.Error(err))
	} else {
		opts.Interceptors = append(opts.Interceptors, ics...)
	}
	return opts
}
