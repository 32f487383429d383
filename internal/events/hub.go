package events

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"go.uber.org/zap"
)

// Channels of PostgreSQL's notifications.
const (
	// channelLogs carries the tenant and the root run, apart by sep, after
	// a commit that wrote to that root run's log (oncerun_emit).
	channelLogs = "oncerun_events"
	// channelEphemeral carries an ephemeral event (see Publish).
	channelEphemeral = "oncerun_ephemeral"
)

// sep parts a tenant from a root run in the hub's keys and the logs'
// notifications: a control character, which no tenant or run id holds.
const sep = "\x1f"

// maxEphemeralBytes bounds an ephemeral event's notification; PostgreSQL
// takes at most 8000 bytes.
const maxEphemeralBytes = 7000

// Publish sends an ephemeral event to the followers of its run's root: not
// written anywhere, delivered at most once, to those following now.
func Publish(ctx context.Context, q Querier, tenant string, e Event) error {
	e.Ephemeral, e.Offset, e.Cursor = true, 0, ""
	e.RootRunID, e.Lineage = Root(e.RunID), Lineage(e.RunID)
	b, err := json.Marshal(ephemeral{Tenant: tenant, Event: e})
	if err != nil {
		return fmt.Errorf("encode an ephemeral event: %w", err)
	}
	if len(b) > maxEphemeralBytes {
		return fmt.Errorf("an ephemeral event of %d bytes is over the %d bytes a notification carries", len(b), maxEphemeralBytes)
	}
	if _, err := q.Exec(ctx, `SELECT pg_notify($1, $2)`, channelEphemeral, string(b)); err != nil {
		return fmt.Errorf("publish an ephemeral event of run %s: %w", e.RunID, err)
	}
	return nil
}

type ephemeral struct {
	Tenant string `json:"tenant"`
	Event  Event  `json:"event"`
}

// Hub wakes the followers of logs when PostgreSQL says a log was written,
// and hands them the ephemeral events of their runs. It holds one
// connection, LISTENing; when that connection is lost it connects again
// and wakes every follower, who read again: a follower misses no event of
// the log, only ephemeral ones.
type Hub struct {
	connect func(ctx context.Context) (*pgx.Conn, error)
	log     *zap.Logger

	mu   sync.Mutex
	subs map[string]map[*Subscription]struct{}
	// gens counts the wakes of each key (see Subscription.Gen).
	gens    map[string]uint64
	started bool
	stop    context.CancelFunc
	done    chan struct{}
}

// NewHub returns a hub that connects with connect when its first follower
// comes.
func NewHub(connect func(ctx context.Context) (*pgx.Conn, error), log *zap.Logger) *Hub {
	if log == nil {
		log = zap.NewNop()
	}
	return &Hub{connect: connect, log: log, subs: map[string]map[*Subscription]struct{}{}, gens: map[string]uint64{}}
}

// Subscription is one follower: Wake has a value when its log may have
// new events; Ephemeral carries the ephemeral events of its runs.
type Subscription struct {
	Wake      chan struct{}
	Ephemeral chan Event
	key       string
	hub       *Hub
}

// Subscribe follows the log of root in tenant, or, with root empty, every
// log of the tenant. Close the subscription when done.
func (h *Hub) Subscribe(tenant, root string) *Subscription {
	s := &Subscription{Wake: make(chan struct{}, 1), Ephemeral: make(chan Event, 256), key: tenant + sep + root, hub: h}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.subs[s.key] == nil {
		h.subs[s.key] = map[*Subscription]struct{}{}
	}
	h.subs[s.key][s] = struct{}{}
	if !h.started {
		h.started = true
		ctx, cancel := context.WithCancel(context.Background())
		h.stop, h.done = cancel, make(chan struct{})
		go h.listen(ctx)
	}
	return s
}

// Gen returns how many times the subscription's log has been woken: a
// read that begins after a wake was seen reads what that wake announced,
// and readers may share a read only if they saw the same count.
func (s *Subscription) Gen() uint64 {
	s.hub.mu.Lock()
	defer s.hub.mu.Unlock()
	return s.hub.gens[s.key]
}

// Close ends the subscription.
func (s *Subscription) Close() {
	h := s.hub
	h.mu.Lock()
	defer h.mu.Unlock()
	delete(h.subs[s.key], s)
	if len(h.subs[s.key]) == 0 {
		delete(h.subs, s.key)
		delete(h.gens, s.key)
	}
}

// Followers returns how many subscriptions are open.
func (h *Hub) Followers() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	n := 0
	for _, m := range h.subs {
		n += len(m)
	}
	return n
}

// Close stops listening.
func (h *Hub) Close() {
	h.mu.Lock()
	stop, done := h.stop, h.done
	h.mu.Unlock()
	if stop != nil {
		stop()
		<-done
	}
}

func (h *Hub) listen(ctx context.Context) {
	defer close(h.done)
	backoff := 100 * time.Millisecond
	for ctx.Err() == nil {
		err := h.listenOnce(ctx)
		if ctx.Err() != nil {
			return
		}
		h.log.Warn("events: the connection that follows the logs was lost; connecting again", zap.Error(err))
		// Whatever was written meanwhile, the followers read it.
		h.wakeAll()
		select {
		case <-ctx.Done():
			return
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, 2*time.Second)
	}
}

func (h *Hub) listenOnce(ctx context.Context) error {
	conn, err := h.connect(ctx)
	if err != nil {
		return err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	for _, ch := range []string{channelLogs, channelEphemeral} {
		if _, err := conn.Exec(ctx, "LISTEN "+ch); err != nil {
			return err
		}
	}
	// Events written before LISTEN took hold are read by the wake.
	h.wakeAll()
	for {
		n, err := conn.WaitForNotification(ctx)
		if err != nil {
			return err
		}
		switch n.Channel {
		case channelLogs:
			tenant, _, _ := strings.Cut(n.Payload, sep)
			h.wake(n.Payload)
			h.wake(tenant + sep)
		case channelEphemeral:
			var e ephemeral
			if err := json.Unmarshal([]byte(n.Payload), &e); err != nil {
				continue
			}
			h.hand(e.Tenant+sep+e.Event.RootRunID, e.Event)
			h.hand(e.Tenant+sep, e.Event)
		}
	}
}

func (h *Hub) wake(key string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.gens[key]++
	for s := range h.subs[key] {
		select {
		case s.Wake <- struct{}{}:
		default:
		}
	}
}

func (h *Hub) wakeAll() {
	h.mu.Lock()
	defer h.mu.Unlock()
	for key, m := range h.subs {
		h.gens[key]++
		for s := range m {
			select {
			case s.Wake <- struct{}{}:
			default:
			}
		}
	}
}

// hand gives an ephemeral event to the followers of key; a follower too
// slow to take it misses it.
func (h *Hub) hand(key string, e Event) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for s := range h.subs[key] {
		select {
		case s.Ephemeral <- e:
		default:
		}
	}
}
