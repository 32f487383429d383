package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"time"

	"github.com/dbos-inc/dbos-transact-golang/dbos"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// dbosRuntime is DBOS Transact running in this process, its system
// database a database of its own that also holds the order_notes table.
// Both DBOS implementations are workflows of it.
type dbosRuntime struct {
	ctx  dbos.Context
	db   string
	pool *pgxpool.Pool
	// notes is a data source on the system database's own pool: a
	// RunAsTransaction on it commits the step's effect and its checkpoint
	// in one transaction.
	notes *dbos.DataSource
}

// startDBOS makes DBOS's database, with the order_notes table, and
// launches DBOS on it with both implementations' workflows.
func startDBOS(ctx context.Context, e env) (*dbosRuntime, error) {
	db := e.database("dbos")
	if err := e.pg.create(ctx, db); err != nil {
		return nil, err
	}
	// One connection more than the others': DBOS's LISTEN for its
	// notifications holds one of its pool's for good.
	url, err := e.pg.poolURL(db, e.poolSize+1)
	if err != nil {
		return nil, err
	}
	pool, err := openPool(ctx, url)
	if err != nil {
		return nil, err
	}
	r := &dbosRuntime{db: db, pool: pool}
	if err := r.launch(ctx); err != nil {
		r.stop()
		return nil, err
	}
	return r, nil
}

func (r *dbosRuntime) launch(ctx context.Context) error {
	if err := migrate(ctx, r.pool); err != nil {
		return err
	}
	var err error
	r.ctx, err = dbos.NewContext(ctx, dbos.Config{
		AppName: "peers", SystemDBPool: r.pool,
		Logger: slog.New(slog.NewJSONHandler(io.Discard, &slog.HandlerOptions{Level: slog.LevelInfo})),
	})
	if err != nil {
		return fmt.Errorf("DBOS: %w", err)
	}
	if r.notes, err = dbos.NewDataSource(r.ctx, r.pool, dbos.WithDataSourceName("notes")); err != nil {
		return fmt.Errorf("DBOS data source: %w", err)
	}
	dbos.RegisterWorkflow(r.ctx, r.txNotes, dbos.WithWorkflowName("peers.txNotes"))
	dbos.RegisterWorkflow(r.ctx, r.stepNotes, dbos.WithWorkflowName("peers.stepNotes"))
	if err := dbos.Launch(r.ctx); err != nil {
		return fmt.Errorf("launch DBOS: %w", err)
	}
	return nil
}

// txNotes makes a run's notes, each a RunAsTransaction step: its insert
// and its checkpoint commit together, so it happens once.
func (r *dbosRuntime) txNotes(ctx dbos.Context, in NotesInput) (int, error) {
	for n := 1; n <= in.Steps; n++ {
		_, err := dbos.RunAsTransaction(ctx, r.notes, func(ctx context.Context, tx dbos.Tx) (int64, error) {
			note, err := scanNote(tx.QueryRow(ctx, insertNote, "acme", "1001", noteText(n), noteKey(implDBOSTx, in.RunID, n)))
			return note.id, err
		})
		if err != nil {
			return n - 1, err
		}
	}
	return in.Steps, nil
}

// stepNotes makes a run's notes, each a RunAsStep: the insert commits in a
// transaction of its own and DBOS checkpoints the step after it, so a
// crash between the two makes it again.
func (r *dbosRuntime) stepNotes(ctx dbos.Context, in NotesInput) (int, error) {
	for n := 1; n <= in.Steps; n++ {
		_, err := dbos.RunAsStep(ctx, func(ctx context.Context) (int64, error) {
			var id int64
			err := pgx.BeginFunc(ctx, r.pool, func(tx pgx.Tx) error {
				note, err := scanNote(tx.QueryRow(ctx, insertNote, "acme", "1001", noteText(n), noteKey(implDBOSStep, in.RunID, n)))
				id = note.id
				return err
			})
			return id, err
		})
		if err != nil {
			return n - 1, err
		}
	}
	return in.Steps, nil
}

func (r *dbosRuntime) stop() {
	if r.ctx != nil {
		_ = dbos.Shutdown(r.ctx, 30*time.Second)
	}
	r.pool.Close()
}

// dbosPeer is one of dbosRuntime's workflows.
type dbosPeer struct {
	rt    *dbosRuntime
	impl  string
	wf    dbos.Workflow[NotesInput, int]
	steps int
}

// peers are the DBOS implementations.
func (r *dbosRuntime) peers(steps int) []*dbosPeer {
	return []*dbosPeer{
		{rt: r, impl: implDBOSTx, wf: r.txNotes, steps: steps},
		{rt: r, impl: implDBOSStep, wf: r.stepNotes, steps: steps},
	}
}

func (d *dbosPeer) name() string        { return d.impl }
func (d *dbosPeer) databases() []string { return []string{d.rt.db} }
func (d *dbosPeer) usesTemporal() bool  { return false }

// run runs the workflow in this process and waits for its result. The
// workflow runs under DBOS's context, not ctx.
func (d *dbosPeer) run(_ context.Context, id string) error {
	h, err := dbos.RunWorkflow(d.rt.ctx, d.wf, NotesInput{RunID: id, Steps: d.steps}, dbos.WithWorkflowID(d.impl+"-"+id))
	if err != nil {
		return err
	}
	n, err := h.GetResult()
	switch {
	case err != nil:
		return fmt.Errorf("run %s: %w", id, err)
	case n != d.steps:
		return fmt.Errorf("run %s made %d steps of %d", id, n, d.steps)
	}
	return nil
}

func (d *dbosPeer) notes(ctx context.Context) (int, error) {
	return countNotes(ctx, d.rt.pool, d.impl+"/")
}
