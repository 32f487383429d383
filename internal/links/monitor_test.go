package links_test

import (
	"context"
	"errors"
	"net/url"
	"slices"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/oncerun/oncerun/internal/links"
	"github.com/oncerun/oncerun/internal/netfault"
	"github.com/oncerun/oncerun/internal/pgtest"
)

// throughProxy returns the connection configuration of the test server's
// database, reached through a netfault proxy.
func throughProxy(t *testing.T) (*pgx.ConnConfig, *netfault.Proxy) {
	t.Helper()
	u, err := url.Parse(pgtest.ServerURL())
	require.NoError(t, err)
	p, err := netfault.Listen("127.0.0.1:0", u.Host)
	require.NoError(t, err)
	t.Cleanup(func() { _ = p.Close() })
	u.Host = p.Addr()
	cfg, err := pgx.ParseConfig(u.String())
	require.NoError(t, err)
	return cfg, p
}

func run(t *testing.T, cfg links.Config, ls ...links.Link) *links.Monitor {
	t.Helper()
	m, err := links.New(cfg, ls...)
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); m.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	return m
}

func cutOff(m *links.Monitor) []string {
	names, _ := m.CutOff()
	return names
}

// A link black-holed (its socket open, nothing arriving) is cut off once
// it has not answered for CutOffAfter, and answers again once it heals.
func TestABlackHoledPostgresIsCutOffAndComesBack(t *testing.T) {
	t.Parallel()
	cfg, proxy := throughProxy(t)
	m := run(t, links.Config{Interval: 100 * time.Millisecond, CutOffAfter: 500 * time.Millisecond}, links.Postgres(cfg))
	// It answers first.
	require.Eventually(t, func() bool { return !m.Statuses()[0].LastAnswer.IsZero() }, 10*time.Second, 20*time.Millisecond)
	assert.Empty(t, cutOff(m))

	changed := m.Changed()
	proxy.Set(netfault.Fault{Hold: netfault.Both})
	select {
	case <-changed:
	case <-time.After(10 * time.Second):
		t.Fatal("a black-holed link was never cut off")
	}
	assert.Equal(t, []string{"postgres"}, cutOff(m))
	assert.True(t, m.Statuses()[0].CutOff)
	// The hung probe's own deadline passes after the cut: the clock
	// judges, not the probe's return.
	require.Eventually(t, func() bool { return m.Statuses()[0].Error != "" }, 10*time.Second, 20*time.Millisecond)
	assert.Contains(t, m.Statuses()[0].Error, "no answer within 500ms")

	changed = m.Changed()
	proxy.Heal()
	select {
	case <-changed:
	case <-time.After(10 * time.Second):
		t.Fatal("a healed link never answered again")
	}
	assert.Empty(t, cutOff(m))
	assert.Empty(t, m.Statuses()[0].Error)
}

// Each link is judged alone: one cut off leaves the others answering.
func TestLinksAreJudgedApart(t *testing.T) {
	t.Parallel()
	down := links.Link{Name: "temporal", Probe: func(ctx context.Context) error { return errors.New("connection refused") }}
	up := links.Link{Name: "postgres", Probe: func(ctx context.Context) error { return nil }}
	m := run(t, links.Config{Interval: 50 * time.Millisecond, CutOffAfter: 200 * time.Millisecond}, up, down)
	require.Eventually(t, func() bool { return slices.Equal(cutOff(m), []string{"temporal"}) }, 10*time.Second, 20*time.Millisecond)
	st := m.Statuses()
	assert.False(t, st[0].CutOff)
	assert.Equal(t, "connection refused", st[1].Error)
}

func TestConfigNamesWhatIsWrong(t *testing.T) {
	for cfg, want := range map[links.Config]string{
		{Interval: -time.Second}:                              "Interval is -1s",
		{CutOffAfter: -time.Second}:                           "CutOffAfter is -1s",
		{Interval: time.Second, CutOffAfter: time.Second / 2}: "CutOffAfter (500ms) is shorter than Interval (1s)",
	} {
		_, err := links.New(cfg)
		assert.ErrorContains(t, err, want)
	}
	_, err := links.New(links.Config{}, links.Link{Name: "postgres"})
	assert.ErrorContains(t, err, "link 0 has no name or no probe")
}

// A cut-off link must answer twice in a row to count as reachable again:
// one answer on a flapping link would have the worker take work and give
// it back every few seconds.
func TestACutOffLinkMustAnswerTwiceInARow(t *testing.T) {
	t.Parallel()
	var answers atomic.Int32 // answers left to give; negative: answer always
	probe := func(ctx context.Context) error {
		if answers.Load() < 0 {
			return nil
		}
		if answers.Add(-1) >= 0 {
			return nil
		}
		answers.Store(0)
		return errors.New("no route to host")
	}
	answers.Store(0)
	m := run(t, links.Config{Interval: 50 * time.Millisecond, CutOffAfter: 200 * time.Millisecond},
		links.Link{Name: "postgres", Probe: probe})
	require.Eventually(t, func() bool { return len(cutOff(m)) == 1 }, 10*time.Second, 10*time.Millisecond)
	since := m.Statuses()[0].Since
	answers.Store(1) // one answer, then silence again
	time.Sleep(300 * time.Millisecond)
	assert.Equal(t, []string{"postgres"}, cutOff(m), "one answer is not enough")
	assert.Equal(t, since, m.Statuses()[0].Since, "the link stayed cut off throughout")
	answers.Store(-1)
	require.Eventually(t, func() bool { return len(cutOff(m)) == 0 }, 10*time.Second, 10*time.Millisecond)
}

// A server that answers with an error of its own (too many connections) is
// there: the link is not cut off for it.
func TestAServersOwnRefusalIsAnAnswer(t *testing.T) {
	t.Parallel()
	cfg, _ := throughProxy(t)
	cfg.User = "no_such_role_" + strconv.Itoa(int(time.Now().UnixNano()%1e6))
	m := run(t, links.Config{Interval: 50 * time.Millisecond, CutOffAfter: 200 * time.Millisecond}, links.Postgres(cfg))
	time.Sleep(600 * time.Millisecond)
	assert.Empty(t, cutOff(m), "the server answered: role does not exist")
}
