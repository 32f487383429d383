package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"path/filepath"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"go.temporal.io/sdk/client"

	"github.com/oncerun/oncerun/approvals"
	"github.com/oncerun/oncerun/internal/devserver"
	"github.com/oncerun/oncerun/internal/shop"
	"github.com/oncerun/oncerun/tools"
	"github.com/oncerun/oncerun/worker"
	"github.com/oncerun/oncerun/workflows"
)

// oncerunQueue is the task queue of oncerun's worker.
const oncerunQueue = "peers-oncerun"

// oncerunPeer is oncerun's worker with its approvals service, running in
// this process as `oncerun worker` does with APPROVALS_TOKENS_FILE set. Its
// runs are started through POST /v1/runs, as a user starts them; the
// service shares the worker's Temporal client, so they start eagerly.
type oncerunPeer struct {
	api   *approvals.Client
	tc    client.Client
	plan  []tools.ProposedCall
	steps int
	db    string
	pool  *pgxpool.Pool // of one connection, counts the notes
	// stop stops the worker and returns what it ended with.
	stop func() error
}

// startOncerun starts the worker on e's server and database, migrated by
// the worker as at every start, and returns once it polls and its
// approvals service listens. tc is the client that waits for the runs.
func startOncerun(ctx context.Context, e env, tc client.Client) (*oncerunPeer, error) {
	db := e.database(implOncerun)
	if err := e.pg.create(ctx, db); err != nil {
		return nil, err
	}
	url, err := e.pg.poolURL(db, e.poolSize)
	if err != nil {
		return nil, err
	}
	plan := make([]tools.ProposedCall, e.steps)
	for i := range plan {
		args, err := json.Marshal(map[string]string{"order_id": "1001", "text": noteText(i + 1)})
		if err != nil {
			return nil, err
		}
		plan[i] = tools.ProposedCall{Tool: shop.ToolAddOrderNote, Args: args}
	}
	tokensFile := filepath.Join(e.dir, "tokens.json")
	token, entry, err := approvals.NewToken(approvals.Identity{Name: "peers", Tenant: "acme", Role: approvals.RoleOperator})
	if err != nil {
		return nil, err
	}
	if err := approvals.AppendToken(tokensFile, entry); err != nil {
		return nil, err
	}
	httpAddr, err := devserver.FreeAddr("127.0.0.1")
	if err != nil {
		return nil, err
	}
	apAddr, err := devserver.FreeAddr("127.0.0.1")
	if err != nil {
		return nil, err
	}
	polling, listening := make(chan struct{}), make(chan string, 1)
	runCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	exited := make(chan error, 1)
	go func() {
		exited <- worker.Run(runCtx, worker.Config{
			TemporalAddress: e.temporal.addr, Namespace: e.temporal.namespace, TemporalConnectWait: time.Minute,
			TaskQueue: oncerunQueue, DatabaseURL: url, HTTPAddr: httpAddr, Logger: discardLogger(),
			Approvals: worker.ApprovalsConfig{Addr: apAddr, TokensFile: tokensFile, Ready: func(addr string) { listening <- addr }},
			Ready:     func(string) { close(polling) },
		})
	}()
	stop := func() error {
		cancel()
		return <-exited
	}
	var apURL string
	for apURL == "" || polling != nil {
		select {
		case <-polling:
			polling = nil
		case addr := <-listening:
			apURL = "http://" + addr
		case err := <-exited:
			cancel()
			return nil, fmt.Errorf("oncerun's worker stopped: %w", err)
		case <-time.After(2 * time.Minute):
			return nil, errors.Join(errors.New("oncerun's worker did not start in 2 minutes"), stop())
		}
	}
	countURL, err := e.pg.poolURL(db, 1)
	if err != nil {
		return nil, errors.Join(err, stop())
	}
	pool, err := openPool(ctx, countURL)
	if err != nil {
		return nil, errors.Join(err, stop())
	}
	return &oncerunPeer{
		// A client that keeps a connection per run in flight, as a
		// service starting many runs would be configured.
		api: &approvals.Client{BaseURL: apURL, Token: token, HTTP: &http.Client{
			Timeout:   30 * time.Second,
			Transport: &http.Transport{MaxIdleConnsPerHost: 256},
		}},
		tc: tc, plan: plan, steps: e.steps, db: db, pool: pool,
		stop: func() error { pool.Close(); return stop() },
	}, nil
}

func (o *oncerunPeer) name() string        { return implOncerun }
func (o *oncerunPeer) databases() []string { return []string{o.db} }
func (o *oncerunPeer) usesTemporal() bool  { return true }

// run starts run id through the API and waits for the workflow's status.
func (o *oncerunPeer) run(ctx context.Context, id string) error {
	started, _, err := o.api.Start(ctx, approvals.StartRequest{RunID: id, Plan: o.plan})
	if err != nil {
		return err
	}
	var st workflows.Status
	if err := o.tc.GetWorkflow(ctx, started.WorkflowID, started.TemporalRunID).Get(ctx, &st); err != nil {
		return fmt.Errorf("run %s: %w", id, err)
	}
	if st.State != workflows.RunCompleted || len(st.Steps) != o.steps {
		return fmt.Errorf("run %s ended %s with %d steps of %d: %s", id, st.State, len(st.Steps), o.steps, st.Error)
	}
	return nil
}

// notes counts the notes of its database: oncerun's keys are its own.
func (o *oncerunPeer) notes(ctx context.Context) (int, error) { return countNotes(ctx, o.pool, "") }
