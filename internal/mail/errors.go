package mail

import (
	"context"
	"errors"
	"fmt"
)

// ErrNotSent reports that the message was not handed to the server: nothing
// was accepted and a retry cannot produce a duplicate.
var ErrNotSent = errors.New("mail not sent")

// ErrRejected reports that the server read the message and answered the end
// of DATA with a 4xx or 5xx reply. It wraps [ErrNotSent], because a rejected
// message was not accepted.
var ErrRejected = fmt.Errorf("%w: rejected by server", ErrNotSent)

// ErrUnknown reports that the message was written in full but the server's
// reply to it never arrived. The message may have been accepted.
var ErrUnknown = errors.New("mail outcome unknown")

// classify wraps err with the class sentinel and the step that failed. When
// ctx is done, its cause is wrapped too, so errors.Is(err, context.Canceled)
// and errors.Is(err, context.DeadlineExceeded) work.
func classify(ctx context.Context, class error, step string, err error) error {
	if cause := context.Cause(ctx); cause != nil {
		return fmt.Errorf("%w: %s: %w: %w", class, step, err, cause)
	}
	return fmt.Errorf("%w: %s: %w", class, step, err)
}
