package main

import (
	"context"
	"fmt"
	"io"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
)

// Names of the implementations (-impls).
const (
	implOncerun  = "oncerun"
	implPlain    = "plain"
	implLocal    = "plain-local"
	implDBOSTx   = "dbos-tx"
	implDBOSStep = "dbos-step"
)

// baseline is the implementation the ratios are to.
const baseline = implDBOSTx

// allImpls lists the implementations in the order of the tables.
var allImpls = []string{implOncerun, implPlain, implLocal, implDBOSTx, implDBOSStep}

// labels describe the implementations in the tables.
var labels = map[string]string{
	implOncerun:  "oncerun (keyed steps, POST /v1/runs)",
	implPlain:    "plain Temporal (10 activities)",
	implLocal:    "plain Temporal (10 local activities)",
	implDBOSTx:   "DBOS RunAsTransaction",
	implDBOSStep: "DBOS RunAsStep (at least once)",
}

// peer is one implementation: it makes runs, each of the benchmark's steps,
// every step inserting one order note.
type peer interface {
	// name is one of the impl* names.
	name() string
	// run makes run id and returns once it has ended, with an error if it
	// did not end with every step done.
	run(ctx context.Context, id string) error
	// databases names the databases whose backends work for it.
	databases() []string
	// usesTemporal reports whether the Temporal server works for it.
	usesTemporal() bool
	// notes counts the notes it has inserted.
	notes(ctx context.Context) (int, error)
}

// env is what the implementations of one Temporal server share.
type env struct {
	// temporal is the server.
	temporal *temporalServer
	// pg is the PostgreSQL server, prefix the start of the names of the
	// databases made for this Temporal server.
	pg     server
	prefix string
	// dir is a directory for files of this Temporal server's.
	dir string
	// steps is the number of steps of a run, poolSize the connections of
	// each implementation's pool.
	steps, poolSize int
}

// database is the name of impl's database.
func (e env) database(impl string) string { return e.prefix + "_" + impl }

// noteText is the text of note n, as the scripted run's plan writes it.
func noteText(n int) string { return fmt.Sprintf("note %d", n) }

// discardLogger logs at info as a deployed process would, into nothing:
// every implementation pays for formatting the lines it logs, none for
// writing them to a terminal.
func discardLogger() *zap.Logger {
	enc := zapcore.NewJSONEncoder(zap.NewProductionEncoderConfig())
	return zap.New(zapcore.NewCore(enc, zapcore.AddSync(io.Discard), zap.InfoLevel), zap.AddCaller())
}
