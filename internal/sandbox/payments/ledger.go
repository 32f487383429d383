package payments

import (
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"time"
)

// ledgerFileName is the ledger's file inside Config.DataDir.
const ledgerFileName = "ledger.json"

// ledgerVersion is the version of the file format written by save.
const ledgerVersion = 1

// keyRecord binds an idempotency key to the request it first succeeded with
// and the refund that request made.
type keyRecord struct {
	Key       string    `json:"key"`
	PaymentID string    `json:"payment_id"`
	Amount    int64     `json:"amount"`
	Currency  string    `json:"currency"`
	RefundID  string    `json:"refund_id"`
	FirstSeen time.Time `json:"first_seen"`
}

// ledgerDoc is the ledger file's JSON document.
type ledgerDoc struct {
	Version  int         `json:"version"`
	Payments []Payment   `json:"payments"`
	Refunds  []Refund    `json:"refunds"`
	Keys     []keyRecord `json:"keys"`
}

// ledger is the sandbox's state: payments, every refund ever made and the
// idempotency keys still retained. It is not safe for concurrent use; the
// Server guards it with its mutex. Every change is written to disk before
// the method making it returns, and undone in memory if the write fails.
type ledger struct {
	path      string
	payments  map[string]Payment
	refunds   []Refund
	refundIdx map[string]int   // refund id -> index in refunds
	refunded  map[string]int64 // payment id -> sum of its refunds
	keys      map[string]keyRecord
}

// openLedger reads the ledger in dir, creating dir if it is missing. A
// missing file is an empty ledger.
func openLedger(dir string) (*ledger, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("create data dir: %w", err)
	}
	l := &ledger{
		path:      filepath.Join(dir, ledgerFileName),
		payments:  map[string]Payment{},
		refundIdx: map[string]int{},
		refunded:  map[string]int64{},
		keys:      map[string]keyRecord{},
	}
	data, err := os.ReadFile(l.path)
	if errors.Is(err, fs.ErrNotExist) {
		return l, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read ledger: %w", err)
	}
	var doc ledgerDoc
	if err := json.Unmarshal(data, &doc); err != nil {
		return nil, fmt.Errorf("parse ledger %s: %w", l.path, err)
	}
	if doc.Version != ledgerVersion {
		return nil, fmt.Errorf("ledger %s: unsupported version %d", l.path, doc.Version)
	}
	for _, p := range doc.Payments {
		l.payments[p.ID] = p
	}
	for _, r := range doc.Refunds {
		l.refundIdx[r.ID] = len(l.refunds)
		l.refunds = append(l.refunds, r)
		l.refunded[r.PaymentID] += r.Amount
	}
	for _, k := range doc.Keys {
		if _, ok := l.refundIdx[k.RefundID]; !ok {
			return nil, fmt.Errorf("ledger %s: key %q names unknown refund %s", l.path, k.Key, k.RefundID)
		}
		l.keys[k.Key] = k
	}
	return l, nil
}

// save writes the whole ledger to a temporary file, syncs it and renames it
// over the ledger file, so a crash leaves either the old or the new ledger.
func (l *ledger) save() error {
	doc := ledgerDoc{Version: ledgerVersion, Payments: l.paymentList(), Refunds: l.refunds}
	if doc.Refunds == nil {
		doc.Refunds = []Refund{}
	}
	doc.Keys = make([]keyRecord, 0, len(l.keys))
	for _, k := range l.keys {
		doc.Keys = append(doc.Keys, k)
	}
	slices.SortFunc(doc.Keys, func(a, b keyRecord) int { return cmp.Compare(a.Key, b.Key) })
	data, err := json.MarshalIndent(doc, "", "  ")
	if err != nil {
		return fmt.Errorf("encode ledger: %w", err)
	}
	return writeFileAtomic(l.path, data)
}

// paymentList returns the payments ordered by id.
func (l *ledger) paymentList() []Payment {
	out := make([]Payment, 0, len(l.payments))
	for _, p := range l.payments {
		out = append(out, p)
	}
	slices.SortFunc(out, func(a, b Payment) int { return cmp.Compare(a.ID, b.ID) })
	return out
}

// addPayments stores ps, all or none. Payments already stored with the same
// values are left as they are; one with different values fails the batch
// with ErrPaymentConflict.
func (l *ledger) addPayments(ps []Payment) ([]Payment, error) {
	batch := map[string]Payment{}
	out := make([]Payment, 0, len(ps))
	for _, p := range ps {
		p, err := normalisePayment(p)
		if err != nil {
			return nil, err
		}
		for _, seen := range []map[string]Payment{l.payments, batch} {
			if old, ok := seen[p.ID]; ok && old != p {
				return nil, fmt.Errorf("%w: %s is stored as %d %s", ErrPaymentConflict, p.ID, old.Amount, old.Currency)
			}
		}
		batch[p.ID] = p
		out = append(out, p)
	}
	var added []string
	for id, p := range batch {
		if _, ok := l.payments[id]; !ok {
			l.payments[id] = p
			added = append(added, id)
		}
	}
	if len(added) == 0 {
		return out, nil
	}
	if err := l.save(); err != nil {
		for _, id := range added {
			delete(l.payments, id)
		}
		return nil, err
	}
	return out, nil
}

// writeFileAtomic replaces path with data durably: temp file, fsync,
// rename, fsync of the directory.
func writeFileAtomic(path string, data []byte) error {
	dir := filepath.Dir(path)
	tmp, err := os.CreateTemp(dir, ".ledger-*.tmp")
	if err != nil {
		return fmt.Errorf("write ledger: %w", err)
	}
	defer os.Remove(tmp.Name()) // no-op once renamed
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		return fmt.Errorf("write ledger: %w", err)
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return fmt.Errorf("sync ledger: %w", err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("close ledger: %w", err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return fmt.Errorf("replace ledger: %w", err)
	}
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("sync data dir: %w", err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("sync data dir: %w", err)
	}
	return nil
}
