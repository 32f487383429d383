package tools_test

import (
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/oncerun/oncerun/tools"
)

// A natural or keyed tool's steps run inside the workflow task; a read's
// only when it declares that it reads the database alone; an external
// tool's never.
func TestWhichToolsRunLocally(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		tool tools.Tool
		want bool
	}{
		{tools.Tool{Class: tools.ClassNatural}, true},
		{tools.Tool{Class: tools.ClassKeyed}, true},
		{tools.Tool{Class: tools.ClassRead, InDatabase: true}, true},
		{tools.Tool{Class: tools.ClassRead}, false},
		{tools.Tool{Class: tools.ClassExternal}, false},
		{tools.Tool{Class: tools.ClassExternal, InDatabase: true}, false},
	} {
		assert.Equal(t, tc.want, tc.tool.Local(), "%s, in database %t", tc.tool.Class, tc.tool.InDatabase)
	}
}
