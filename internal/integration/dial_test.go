package integration

import (
	"context"
	"io"
	"net"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/client"
	"go.uber.org/zap"

	"github.com/oncerun/oncerun/worker"
)

// A process started while Temporal is not reachable yet keeps trying and
// connects once it is: here the frontend appears behind a proxy a moment
// after the dial began.
func TestDialTemporalWaitsForAServerThatComesUpLater(t *testing.T) {
	t.Parallel()
	addr := freeAddr(t)
	go func() {
		time.Sleep(1500 * time.Millisecond)
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			t.Errorf("listen on %s: %v", addr, err)
			return
		}
		t.Cleanup(func() { _ = ln.Close() })
		for {
			in, err := ln.Accept()
			if err != nil {
				return
			}
			out, err := net.Dial("tcp", frontend)
			if err != nil {
				_ = in.Close()
				continue
			}
			go func() { _, _ = io.Copy(out, in); _ = out.Close() }()
			go func() { _, _ = io.Copy(in, out); _ = in.Close() }()
		}
	}()
	start := time.Now()
	c, err := worker.DialTemporal(context.Background(), client.Options{HostPort: addr, Namespace: namespace}, time.Minute, zap.NewNop())
	require.NoError(t, err)
	defer c.Close()
	assert.GreaterOrEqual(t, time.Since(start), 1500*time.Millisecond, "it connected only once the server was there")
	_, err = c.CheckHealth(context.Background(), &client.CheckHealthRequest{})
	assert.NoError(t, err)
}
