package telemetry

import (
	"context"
	"testing"

	"github.com/exaring/otelpgx"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/oncerun/oncerun/internal/pgtest"
)

// The pool's tracer traces a transaction's statements, batched or not,
// and leaves out its BEGIN, COMMIT and ROLLBACK.
func TestQueryTracerLeavesOutTransactionControl(t *testing.T) {
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	cfg, err := pgx.ParseConfig(pgtest.NewEmptyDB(t).URL)
	require.NoError(t, err)
	cfg.Tracer = queryTracer{otelpgx.NewTracer(otelpgx.WithTracerProvider(tp))}
	// otelpgx traces the statements of a traced request only.
	ctx, parent := tp.Tracer("test").Start(context.Background(), "request")
	defer parent.End()
	conn, err := pgx.ConnectConfig(ctx, cfg)
	require.NoError(t, err)
	t.Cleanup(func() { _ = conn.Close(ctx) })

	tx, err := conn.Begin(ctx)
	require.NoError(t, err)
	_, err = tx.Exec(ctx, "SELECT 1")
	require.NoError(t, err)
	b := &pgx.Batch{}
	b.Queue("SELECT 2")
	b.Queue("COMMIT")
	require.NoError(t, tx.SendBatch(ctx, b).Close())
	tx, err = conn.Begin(ctx)
	require.NoError(t, err)
	require.NoError(t, tx.Rollback(ctx))

	var names []string
	for _, s := range rec.Ended() {
		if s.Name() == "connect" {
			continue
		}
		names = append(names, s.Name()+" "+attr(s, "db.query.text"))
	}
	assert.ElementsMatch(t, []string{"SELECT SELECT 1", "SELECT SELECT 2", "batch start "}, trimmed(names))
}

func attr(s sdktrace.ReadOnlySpan, key string) string {
	for _, kv := range s.Attributes() {
		if string(kv.Key) == key {
			return kv.Value.Emit()
		}
	}
	return ""
}

func trimmed(names []string) []string {
	for i, n := range names {
		if len(n) > 40 {
			names[i] = n[:40]
		}
	}
	return names
}

func TestTransactionControl(t *testing.T) {
	for sql, want := range map[string]bool{
		"begin": true, "BEGIN ISOLATION LEVEL SERIALIZABLE": true, " commit": true, "rollback": true,
		"SELECT 1": false, "beginning": false, "INSERT INTO commits VALUES (1)": false, "": false,
	} {
		assert.Equal(t, want, transactionControl(sql), sql)
	}
}
