package activities

import (
	"time"

	"github.com/oncerun/oncerun/internal/keys"
	"github.com/oncerun/oncerun/internal/questions"
)

// These are functions, not methods: every exported method of Activities is
// registered as an activity.

// SetLiveHold makes a's live questions' holds last d unrenewed, renewed
// every d/6 (at most every livePoll).
func SetLiveHold(a *Activities, d time.Duration) { a.liveHoldFor = d }

// AskLive is how a's call of in, under key, puts a live question to a
// person.
func AskLive(a *Activities, in ToolInput, key keys.Key) questions.Live { return a.askLive(in, key) }
