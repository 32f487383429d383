package watchdog

import (
	"context"
	"time"

	"github.com/oncerun/oncerun/internal/idempotency"
	"github.com/oncerun/oncerun/internal/runs"
)

// MaxExpiring bounds the keys one [Expiring] listing looks at.
const MaxExpiring = 10000

// ExpiringKey is a key that will expire soon, or has expired, while its run
// is open: a key the watchdog would alert on.
type ExpiringKey struct {
	idempotency.ExpiringKey
	// RunState is the open run's state in words, as Temporal has it.
	RunState string
}

// Expiring lists the keys that expire within the given time (expired ones
// included) and whose run is open, soonest first: of tenant, or of every
// tenant when tenant is empty. It looks at the MaxExpiring keys expiring
// first, asking runs once per distinct run; complete is false when there
// were more, of which keys of closed runs not pruned yet may have crowded
// out later keys of open runs.
func Expiring(ctx context.Context, db idempotency.DB, rs runs.States, within time.Duration, tenant string) (list []ExpiringKey, complete bool, err error) {
	due, err := idempotency.ExpiringKeys(ctx, db, within, tenant, MaxExpiring)
	if err != nil {
		return nil, false, err
	}
	states := map[runRef]string{} // "" for a closed run
	list = []ExpiringKey{}
	for _, k := range due {
		ref := runRef{k.Tenant, k.RunID}
		state, seen := states[ref]
		if !seen {
			open, word, err := rs.RunState(ctx, k.Tenant, k.RunID)
			if err != nil {
				return nil, false, err
			}
			if !open {
				word = ""
			}
			states[ref], state = word, word
		}
		if state != "" {
			list = append(list, ExpiringKey{ExpiringKey: k, RunState: state})
		}
	}
	return list, len(due) < MaxExpiring, nil
}
