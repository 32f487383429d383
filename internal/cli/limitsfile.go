package cli

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5/pgxpool"
	"go.uber.org/zap"

	"github.com/oncerun/oncerun/internal/settings"
	"github.com/oncerun/oncerun/internal/spend"
	"github.com/oncerun/oncerun/migrations"
	"github.com/oncerun/oncerun/worker"
)

// LimitsFile is a limits file read and checked, to apply once the schema
// is migrated.
type LimitsFile struct {
	Path string
	Caps []spend.Cap
}

// LimitsFile reads the limits file ONCERUN_LIMITS_FILE names, checked
// against the deployment's tools ([Env.Registry]); nil when the variable
// is not set. An invalid file is an error naming the variable, the limit
// and the field, so that the process stops before it starts anything.
func (e Env) LimitsFile() (*LimitsFile, error) {
	path := ""
	if e.Getenv != nil {
		path = e.Getenv(settings.EnvLimitsFile)
	}
	if path == "" {
		return nil, nil
	}
	reg, err := e.Registry()
	if err != nil {
		return nil, err
	}
	caps, err := spend.LoadFile(path, reg)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", settings.EnvLimitsFile, err)
	}
	return &LimitsFile{Path: path, Caps: caps}, nil
}

// Apply sets the file's caps (spend.Apply): each as set by "file:<path>",
// replacing a cap of the same tenant and name.
func (f *LimitsFile) Apply(ctx context.Context, pool *pgxpool.Pool, log *zap.Logger) error {
	if err := spend.Apply(ctx, pool, f.Caps, f.Path); err != nil {
		return fmt.Errorf("%s: %w", settings.EnvLimitsFile, err)
	}
	log.Info("limits file applied", zap.String("path", f.Path), zap.Int("limits", len(f.Caps)))
	return nil
}

// Setup is a worker.Config.Setup that applies the file, after next (the
// deployment's own setup) when there is one: a worker runs it once its
// schema is migrated.
func (f *LimitsFile) Setup(next func(context.Context, *pgxpool.Pool) error, log *zap.Logger) func(context.Context, *pgxpool.Pool) error {
	return func(ctx context.Context, pool *pgxpool.Pool) error {
		if next != nil {
			if err := next(ctx, pool); err != nil {
				return err
			}
		}
		return f.Apply(ctx, pool, log)
	}
}

// applyMigrated migrates the database at url and applies the file: for
// `oncerun serve`, which runs no worker setup.
func (f *LimitsFile) applyMigrated(ctx context.Context, url string, log *zap.Logger) error {
	pool, err := worker.NewPool(ctx, url)
	if err != nil {
		return err
	}
	defer pool.Close()
	conn, err := pool.Acquire(ctx)
	if err != nil {
		return fmt.Errorf("connect to PostgreSQL: %w", err)
	}
	_, err = migrations.Migrate(ctx, conn.Conn())
	conn.Release()
	if err != nil {
		return err
	}
	return f.Apply(ctx, pool, log)
}
