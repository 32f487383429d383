package reconcile

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/oncerun/oncerun/internal/untrusted"
)

// Bounds on an acknowledgement's text.
const (
	MaxAckByBytes   = 128
	MaxAckNoteBytes = 2000
)

// Ack acknowledges finding id as by, with note saying why the drift is
// accepted or how it was repaired. An acknowledged finding leaves the
// report and is never raised again.
//
// An unknown id is ErrNotFound. Acknowledging again as the same person with
// the same note returns the finding as it stands and no error, so a retried
// command is harmless; any other second acknowledgement returns the finding
// unchanged with ErrAlreadyAcked.
func Ack(ctx context.Context, pool *pgxpool.Pool, id int64, by, note string) (Finding, error) {
	switch {
	case by == "":
		return Finding{}, errors.New("acknowledge: no one named")
	case note == "":
		return Finding{}, errors.New("acknowledge: note is empty; say why the drift is accepted or how it was repaired")
	}
	if err := untrusted.Text("by", by, MaxAckByBytes); err != nil {
		return Finding{}, fmt.Errorf("acknowledge: %w", err)
	}
	if err := untrusted.Text("note", note, MaxAckNoteBytes); err != nil {
		return Finding{}, fmt.Errorf("acknowledge: %w", err)
	}
	rows, err := pool.Query(ctx, `
UPDATE reconciliation_findings SET acked_at = statement_timestamp(), acked_by = $2, ack_note = $3
WHERE id = $1 AND acked_at IS NULL
RETURNING `+findingColumns, id, by, note)
	if err != nil {
		return Finding{}, fmt.Errorf("acknowledge finding %d: %w", id, err)
	}
	f, err := pgx.CollectExactlyOneRow(rows, pgx.RowToStructByName[Finding])
	if err == nil {
		return f, nil
	}
	if !errors.Is(err, pgx.ErrNoRows) {
		return Finding{}, fmt.Errorf("acknowledge finding %d: %w", id, err)
	}
	rows, err = pool.Query(ctx, `SELECT `+findingColumns+` FROM reconciliation_findings WHERE id = $1`, id)
	if err != nil {
		return Finding{}, fmt.Errorf("read finding %d: %w", id, err)
	}
	f, err = pgx.CollectExactlyOneRow(rows, pgx.RowToStructByName[Finding])
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return Finding{}, fmt.Errorf("finding %d: %w", id, ErrNotFound)
	case err != nil:
		return Finding{}, fmt.Errorf("read finding %d: %w", id, err)
	case f.AckedBy == by && f.AckNote == note:
		return f, nil
	}
	return f, fmt.Errorf("finding %d was acknowledged by %s at %s: %w", id, f.AckedBy,
		f.AckedAt.UTC().Format("2006-01-02 15:04:05Z"), ErrAlreadyAcked)
}
