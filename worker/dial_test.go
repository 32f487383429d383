package worker_test

import (
	"context"
	"net"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/client"
	"go.uber.org/zap"

	"github.com/oncerun/oncerun/internal/settings"
	"github.com/oncerun/oncerun/worker"
)

// freeAddr returns a loopback address nothing listens on.
func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	require.NoError(t, ln.Close())
	return addr
}

func TestDialTemporalGivesUpAfterItsWaitNamingTheVariable(t *testing.T) {
	t.Parallel()
	addr := freeAddr(t)
	_, err := worker.DialTemporal(context.Background(), client.Options{HostPort: addr}, 1200*time.Millisecond, zap.NewNop())
	require.Error(t, err)
	assert.ErrorContains(t, err, addr)
	assert.ErrorContains(t, err, settings.EnvTemporalConnectWait)
	assert.Regexp(t, `\(([2-9]|\d\d+) tries`, err.Error(), "it tried again before giving up")
}

func TestDialTemporalWithANegativeWaitTriesOnce(t *testing.T) {
	t.Parallel()
	_, err := worker.DialTemporal(context.Background(), client.Options{HostPort: freeAddr(t)}, -1, zap.NewNop())
	require.Error(t, err)
	assert.ErrorContains(t, err, "(TEMPORAL_ADDRESS)", "one try, naming the variable of the address")
}
