package main

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"go.temporal.io/sdk/client"
	sdkworker "go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"
)

// plainQueue is the task queue of the plain workflows' worker (with the
// implementation's name after it).
const plainQueue = "peers-"

// NotesInput is the input of a plain run.
type NotesInput struct {
	RunID string
	Steps int
	// Local makes the notes local activities.
	Local bool
}

// NoteInput is the input of one of a plain run's activities.
type NoteInput struct {
	RunID string
	N     int
	// Impl names the implementation whose note it is, in its key.
	Impl string
}

// PlainNotes makes a run's notes one after the other: as regular
// activities, what a Temporal user writes for the same inserts, with no
// planner, no keys and no status; or, with Local, as local activities in
// the run's workflow task, as oncerun's database steps run: the least a
// step costs on Temporal.
func PlainNotes(ctx workflow.Context, in NotesInput) error {
	var a *plainActivities
	for n := 1; n <= in.Steps; n++ {
		note := NoteInput{RunID: in.RunID, N: n, Impl: implPlain}
		var f workflow.Future
		if in.Local {
			note.Impl = implLocal
			f = workflow.ExecuteLocalActivity(workflow.WithLocalActivityOptions(ctx, workflow.LocalActivityOptions{StartToCloseTimeout: 30 * time.Second}), a.AddNote, note)
		} else {
			f = workflow.ExecuteActivity(workflow.WithActivityOptions(ctx, workflow.ActivityOptions{StartToCloseTimeout: 30 * time.Second}), a.AddNote, note)
		}
		if err := f.Get(ctx, nil); err != nil {
			return err
		}
	}
	return nil
}

// plainActivities are the plain workflow's activities.
type plainActivities struct{ pool *pgxpool.Pool }

// AddNote inserts note n of a run in one transaction.
func (a *plainActivities) AddNote(ctx context.Context, in NoteInput) error {
	return pgx.BeginFunc(ctx, a.pool, func(tx pgx.Tx) error {
		_, err := scanNote(tx.QueryRow(ctx, insertNote, "acme", "1001", noteText(in.N), noteKey(in.Impl, in.RunID, in.N)))
		return err
	})
}

// plainPeer runs PlainNotes on a worker of its own in this process.
type plainPeer struct {
	impl  string
	tc    client.Client
	steps int
	db    string
	pool  *pgxpool.Pool
	w     sdkworker.Worker
}

// startPlain makes the database of impl (implPlain or implLocal) and
// starts its worker with tc, which also starts its runs.
func startPlain(ctx context.Context, e env, tc client.Client, impl string) (*plainPeer, error) {
	db := e.database(impl)
	if err := e.pg.create(ctx, db); err != nil {
		return nil, err
	}
	url, err := e.pg.poolURL(db, e.poolSize)
	if err != nil {
		return nil, err
	}
	pool, err := openPool(ctx, url)
	if err != nil {
		return nil, err
	}
	if err := migrate(ctx, pool); err != nil {
		pool.Close()
		return nil, err
	}
	w := sdkworker.New(tc, plainQueue+impl, sdkworker.Options{})
	w.RegisterWorkflow(PlainNotes)
	w.RegisterActivity(&plainActivities{pool: pool})
	if err := w.Start(); err != nil {
		pool.Close()
		return nil, fmt.Errorf("start the plain worker: %w", err)
	}
	return &plainPeer{impl: impl, tc: tc, steps: e.steps, db: db, pool: pool, w: w}, nil
}

func (p *plainPeer) name() string        { return p.impl }
func (p *plainPeer) databases() []string { return []string{p.db} }
func (p *plainPeer) usesTemporal() bool  { return true }

// run starts the workflow, eagerly as oncerun's runs start, and waits for
// it.
func (p *plainPeer) run(ctx context.Context, id string) error {
	wr, err := p.tc.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: p.impl + "-" + id, TaskQueue: plainQueue + p.impl, EnableEagerStart: true},
		PlainNotes, NotesInput{RunID: id, Steps: p.steps, Local: p.impl == implLocal})
	if err != nil {
		return err
	}
	if err := wr.Get(ctx, nil); err != nil {
		return fmt.Errorf("run %s: %w", id, err)
	}
	return nil
}

func (p *plainPeer) notes(ctx context.Context) (int, error) {
	return countNotes(ctx, p.pool, p.impl+"/")
}

func (p *plainPeer) stop() {
	p.w.Stop()
	p.pool.Close()
}
