package idempotency

import (
	"errors"
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
)

// A call cut off by its lease names the lost lease once, and wraps it
// whether or not its own error quoted it.
func TestACutOffCallNamesItsCauseOnce(t *testing.T) {
	cause := fmt.Errorf("no renewal for 8s, and the lease may have expired: %w", ErrLeaseLost)
	quoted := withCause(errors.New(`Post "http://provider/v1/refunds": `+cause.Error()), cause)
	assert.Equal(t, `Post "http://provider/v1/refunds": no renewal for 8s, and the lease may have expired: lease lost`, quoted.Error())
	assert.ErrorIs(t, quoted, ErrLeaseLost)

	plain := withCause(errors.New("connection reset"), cause)
	assert.Equal(t, "connection reset (no renewal for 8s, and the lease may have expired: lease lost)", plain.Error())
	assert.ErrorIs(t, plain, ErrLeaseLost)
}
