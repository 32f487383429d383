package payments

import (
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestLedger_SurvivesRestart(t *testing.T) {
	t.Parallel()
	e := setup(t)
	require.NoError(t, e.run.SeedPayment(Payment{ID: "pi_2", Amount: 50, Currency: "EUR"}))
	first := e.okRefund("k1", body(300, "usd"))
	require.NoError(t, e.run.Close())

	again := setup(t, func(c *Config) { c.DataDir = e.dir; c.Now = e.clock.Now })

	require.Equal(t, []Refund{first}, again.run.Refunds())
	require.Equal(t, []Payment{{ID: "pi_1", Amount: 1000, Currency: "usd"}, {ID: "pi_2", Amount: 50, Currency: "eur"}},
		again.run.Payments())
	require.Equal(t, first, again.okRefund("k1", body(300, "usd")), "the key still replays")
	apiError(t, again.refund("k1", body(301, "usd")), http.StatusUnprocessableEntity)
	apiError(t, again.refund("k2", body(701, "usd")), http.StatusBadRequest) // 300 already refunded
}

func TestLedger_RetentionCountsAcrossRestart(t *testing.T) {
	t.Parallel()
	e := setup(t)
	first := e.okRefund("k1", body(300, "usd"))
	require.NoError(t, e.run.Close())
	e.clock.Advance(25 * time.Hour)

	again := setup(t, func(c *Config) { c.DataDir = e.dir; c.Now = e.clock.Now })

	require.NotEqual(t, first.ID, again.okRefund("k1", body(300, "usd")).ID)
}

func TestLedger_WrittenAtomically(t *testing.T) {
	t.Parallel()
	e := setup(t)
	e.okRefund("k1", body(300, "usd"))

	entries, err := os.ReadDir(e.dir)
	require.NoError(t, err)
	require.Len(t, entries, 1, "no temporary files are left behind")
	require.Equal(t, ledgerFileName, entries[0].Name())
	l, err := openLedger(e.dir)
	require.NoError(t, err)
	require.Len(t, l.refunds, 1, "the refund is on disk when the answer arrives")
}

func TestNew_RejectsCorruptLedger(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, ledgerFileName), []byte("{not json"), 0o600))

	_, err := New(Config{DataDir: dir})

	require.ErrorContains(t, err, "parse ledger")
}

func TestNew_CreatesDataDirAndRequiresIt(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(t.TempDir(), "a", "b")

	_, err := New(Config{DataDir: dir, Payments: []Payment{{ID: "pi_1", Amount: 1, Currency: "usd"}}})

	require.NoError(t, err)
	require.FileExists(t, filepath.Join(dir, ledgerFileName))
	_, err = New(Config{})
	require.ErrorIs(t, err, ErrConfig)
}

func TestLedger_ForgetsExpiredKeysButKeepsRefunds(t *testing.T) {
	t.Parallel()
	e := setup(t)
	e.okRefund("k1", body(100, "usd"))
	e.clock.Advance(25 * time.Hour)

	e.okRefund("k2", body(100, "usd"))

	l, err := openLedger(e.dir)
	require.NoError(t, err)
	require.Len(t, l.refunds, 2)
	require.Contains(t, l.keys, "k2")
	require.NotContains(t, l.keys, "k1")
}
