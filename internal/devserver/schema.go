package devserver

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/server/common/config"
	"go.temporal.io/server/common/log"
	"go.temporal.io/server/common/metrics"
	"go.temporal.io/server/common/persistence"
	"go.temporal.io/server/common/persistence/serialization"
	persistencesql "go.temporal.io/server/common/persistence/sql"
	"go.temporal.io/server/common/resolver"
	pgschema "go.temporal.io/server/schema/postgresql/v12"
	"go.temporal.io/server/schema/sqlite"
	"go.temporal.io/server/tools/common/schema"
	toolsql "go.temporal.io/server/tools/sql"
)

// The embedded schema directories of Temporal's PostgreSQL stores, as
// Temporal's schema tool names them.
const (
	mainSchema       = "postgresql/v12/temporal"
	visibilitySchema = "postgresql/v12/visibility"
)

// lockCluster connects to the cluster's PostgreSQL server and takes the
// advisory lock of the cluster's databases, waiting for a node that holds
// it. Closing the connection releases the lock, as does the death of the
// process holding it.
func lockCluster(ctx context.Context, cl Cluster) (unlock func(), err error) {
	conn, err := pgx.Connect(ctx, cl.PostgresURL)
	if err != nil {
		return nil, fmt.Errorf("temporal cluster: connect to PostgreSQL: %w", err)
	}
	mainDB, _ := cl.Databases()
	if _, err := conn.Exec(ctx, "SELECT pg_advisory_lock(hashtext($1))", "oncerun temporal cluster "+mainDB); err != nil {
		_ = conn.Close(ctx)
		return nil, fmt.Errorf("temporal cluster: lock %s: %w", mainDB, err)
	}
	return func() { _ = conn.Close(context.Background()) }, nil
}

// prepare creates the cluster's databases if they are missing, brings
// their schema to the version this server needs and registers the
// namespace. Each step is a no-op when it has been done; the caller holds
// the cluster's lock.
func prepare(ctx context.Context, cl Cluster, mainCfg, visibilityCfg *config.SQL, namespace string, logger log.Logger) error {
	conn, err := pgx.Connect(ctx, cl.PostgresURL)
	if err != nil {
		return fmt.Errorf("temporal cluster: connect to PostgreSQL: %w", err)
	}
	defer conn.Close(context.Background())
	for _, store := range []struct {
		cfg    *config.SQL
		schema string
	}{{mainCfg, mainSchema}, {visibilityCfg, visibilitySchema}} {
		if err := createDatabase(ctx, conn, store.cfg.DatabaseName); err != nil {
			return err
		}
		if err := updateSchema(store.cfg, store.schema, logger); err != nil {
			return fmt.Errorf("temporal schema of %s: %w", store.cfg.DatabaseName, err)
		}
	}
	if err := registerNamespace(ctx, mainCfg, namespace, logger); err != nil {
		return fmt.Errorf("register namespace %s: %w", namespace, err)
	}
	return nil
}

// createDatabase creates the database name unless it exists.
func createDatabase(ctx context.Context, conn *pgx.Conn, name string) error {
	var exists bool
	if err := conn.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = $1)", name).Scan(&exists); err != nil {
		return fmt.Errorf("look for database %s: %w", name, err)
	}
	if exists {
		return nil
	}
	if _, err := conn.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize()); err != nil {
		return fmt.Errorf("create database %s: %w", name, err)
	}
	return nil
}

// updateSchema does what `temporal-sql-tool setup-schema -v 0.0` and then
// `update-schema --schema-name dir` do, with the schema files embedded in
// the server: the version tables are created if missing, and every
// versioned change above the database's recorded version is applied, in
// order, each recorded as it is done.
func updateSchema(cfg *config.SQL, dir string, logger log.Logger) error {
	c := *cfg
	db, err := toolsql.NewConnection(&c, logger)
	if err != nil {
		return fmt.Errorf("connect: %w", err)
	}
	defer db.Close()
	if err := schema.NewSetupSchemaTask(db, &schema.SetupConfig{InitialVersion: "0.0"}, logger).Run(); err != nil {
		return fmt.Errorf("set up version tables: %w", err)
	}
	if err := schema.NewUpdateSchemaTask(db, &schema.UpdateConfig{DBName: cfg.DatabaseName, SchemaName: dir}, logger).Run(); err != nil {
		return fmt.Errorf("update: %w", err)
	}
	version, err := db.ReadSchemaVersion()
	if err != nil {
		return fmt.Errorf("read version: %w", err)
	}
	want := pgschema.Version
	if dir == visibilitySchema {
		want = pgschema.VisibilityVersion
	}
	if version != want {
		return fmt.Errorf("schema version %s after the update, want %s", version, want)
	}
	return nil
}

// registerNamespace registers the namespace through Temporal's own
// metadata store, as the server would, unless it exists.
func registerNamespace(ctx context.Context, cfg *config.SQL, name string, logger log.Logger) error {
	serializer := serialization.NewSerializer()
	f := persistencesql.NewFactory(*cfg, resolver.NewNoopResolver(), clusterName, logger, metrics.NoopMetricsHandler, serializer)
	defer f.Close()
	store, err := f.NewMetadataStore()
	if err != nil {
		return err
	}
	mm := persistence.NewMetadataManagerImpl(store, serializer, logger, clusterName)
	_, err = mm.GetNamespace(ctx, &persistence.GetNamespaceRequest{Name: name})
	var notFound *serviceerror.NamespaceNotFound
	switch {
	case err == nil:
		return nil
	case !errors.As(err, &notFound):
		return err
	}
	ns, err := sqlite.NewNamespaceConfig(clusterName, name, false, nil)
	if err != nil {
		return err
	}
	_, err = mm.CreateNamespace(ctx, &persistence.CreateNamespaceRequest{Namespace: ns.Detail, IsGlobalNamespace: ns.IsGlobal})
	return err
}
