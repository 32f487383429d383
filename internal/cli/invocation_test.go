package cli

import (
	"runtime/debug"
	"testing"

	"github.com/stretchr/testify/assert"
)

// TestInvocationNamesTheRunningBinary: the banner's commands are the ones
// that reach the binary a person started, whichever way they started it.
func TestInvocationNamesTheRunningBinary(t *testing.T) {
	loyalty := &debug.BuildInfo{Path: "example.com/loyalty/dev", Main: debug.Module{Path: "example.com/loyalty"}}
	own := &debug.BuildInfo{Path: "github.com/oncerun/oncerun/cmd/oncerun-dev", Main: debug.Module{Path: "github.com/oncerun/oncerun"}}
	root := &debug.BuildInfo{Path: "example.com/tool", Main: debug.Module{Path: "example.com/tool"}}
	for _, c := range []struct {
		args0 string
		build *debug.BuildInfo
		want  string
	}{
		{"/tmp/go-build123/b001/exe/dev", loyalty, "go run ./dev"},
		{"/tmp/go-build9/b001/exe/oncerun-dev", own, "go run ./cmd/oncerun-dev"},
		{"/tmp/go-build9/b001/exe/tool", root, "go run ."},
		{"./loyalty-dev", loyalty, "./loyalty-dev"},
		{"/usr/local/bin/oncerun-dev", own, "/usr/local/bin/oncerun-dev"},
		{"oncerun-dev", own, "oncerun-dev"},
	} {
		assert.Equal(t, c.want, Invocation(c.args0, c.build), "started as %s", c.args0)
	}
}
