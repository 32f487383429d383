package pgtest

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/oncerun/oncerun/migrations"
)

// DefaultURL is the server tests use when DATABASE_URL is not set.
const DefaultURL = "postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable"

// templateLock is the advisory lock key under which a template is built.
const templateLock = int64(0x6f6e636572756e) // "oncerun"

var (
	templateMu   sync.Mutex
	templateName string
)

// ServerURL returns the URL of the server tests run against.
func ServerURL() string {
	if u := os.Getenv("DATABASE_URL"); u != "" {
		return u
	}
	return DefaultURL
}

// DB is a database created for one test.
type DB struct {
	// Name is the database's name.
	Name string
	// URL is a connection string for the database.
	URL string
}

// NewDB creates a migrated database for t and drops it when t ends.
func NewDB(t testing.TB) DB {
	t.Helper()
	return newDB(t, true)
}

// NewEmptyDB creates a database without oncerun's schema for t and drops it
// when t ends; for tests of the migrations themselves.
func NewEmptyDB(t testing.TB) DB {
	t.Helper()
	return newDB(t, false)
}

func newDB(t testing.TB, migrated bool) DB {
	t.Helper()
	db, drop, err := Create(context.Background(), migrated)
	if err != nil {
		t.Fatalf("pgtest: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := drop(ctx); err != nil {
			t.Errorf("pgtest: %v", err)
		}
	})
	return db
}

// Create creates a database, migrated or empty, outside any test (for
// examples and TestMain). The caller must call drop when done.
func Create(ctx context.Context, migrated bool) (db DB, drop func(context.Context) error, err error) {
	name := "oncerun_test_" + strings.ReplaceAll(uuid.NewString(), "-", "")
	u, err := withDatabase(ServerURL(), name)
	if err != nil {
		return DB{}, nil, err
	}
	template := "template0"
	for rebuild := false; ; rebuild = true {
		if migrated {
			if template, err = migratedTemplate(ctx, rebuild); err != nil {
				return DB{}, nil, fmt.Errorf("template database: %w", err)
			}
		}
		err = adminExec(ctx, "CREATE DATABASE "+name+" TEMPLATE "+template)
		var pgErr *pgconn.PgError
		if migrated && !rebuild && errors.As(err, &pgErr) && pgErr.Code == "3D000" {
			// Tests of another version of the migrations, on the same
			// server, dropped this version's template: build it again.
			continue
		}
		if err != nil {
			return DB{}, nil, fmt.Errorf("create database %s: %w", name, err)
		}
		break
	}
	drop = func(ctx context.Context) error {
		if err := adminExec(ctx, "DROP DATABASE IF EXISTS "+name+" WITH (FORCE)"); err != nil {
			return fmt.Errorf("drop database %s: %w", name, err)
		}
		return nil
	}
	return DB{Name: name, URL: u}, drop, nil
}

// adminExec runs one statement on the server's default database.
func adminExec(ctx context.Context, sql string) error {
	conn, err := pgx.Connect(ctx, ServerURL())
	if err != nil {
		return fmt.Errorf("connect to %s: %w (is PostgreSQL running? set DATABASE_URL)", ServerURL(), err)
	}
	defer conn.Close(ctx)
	_, err = conn.Exec(ctx, sql)
	return err
}

// NewPool creates a migrated database for t and returns a pool on it of at
// most maxConns connections, closed when t ends.
func NewPool(t testing.TB, maxConns int32) *pgxpool.Pool {
	t.Helper()
	db := NewDB(t)
	cfg, err := pgxpool.ParseConfig(db.URL)
	if err != nil {
		t.Fatalf("pgtest: parse pool config: %v", err)
	}
	cfg.MaxConns = maxConns
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatalf("pgtest: open pool: %v", err)
	}
	t.Cleanup(pool.Close)
	return pool
}

// Connect opens a single connection to db, closed when t ends.
func Connect(t testing.TB, db DB) *pgx.Conn {
	t.Helper()
	return connect(t, db.URL)
}

func connect(t testing.TB, url string) *pgx.Conn {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatalf("pgtest: connect to %s: %v (is PostgreSQL running? set DATABASE_URL)", url, err)
	}
	t.Cleanup(func() { conn.Close(context.Background()) })
	return conn
}

// migratedTemplate returns the name of the migrated template, built once
// per process, or again when rebuild is set.
func migratedTemplate(ctx context.Context, rebuild bool) (string, error) {
	templateMu.Lock()
	defer templateMu.Unlock()
	if templateName == "" || rebuild {
		// Rebuilt, the template leaves the others be: tests of their
		// version run on the same server now.
		name, err := ensureTemplate(ctx, !rebuild)
		if err != nil {
			return "", err
		}
		templateName = name
	}
	return templateName, nil
}

// ensureTemplate builds the migrated template database unless it exists.
// Test binaries of several packages run at once, so the check and the build
// happen under a session advisory lock. With dropOld, a template it builds
// drops those of other versions of the migrations.
func ensureTemplate(ctx context.Context, dropOld bool) (string, error) {
	name := "oncerun_template_" + migrations.Fingerprint()[:16]
	admin, err := pgx.Connect(ctx, ServerURL())
	if err != nil {
		return "", fmt.Errorf("connect to %s: %w (is PostgreSQL running? set DATABASE_URL)", ServerURL(), err)
	}
	defer admin.Close(ctx)
	if _, err := admin.Exec(ctx, "SELECT pg_advisory_lock($1)", templateLock); err != nil {
		return "", fmt.Errorf("lock: %w", err)
	}
	defer admin.Exec(ctx, "SELECT pg_advisory_unlock($1)", templateLock) //nolint:errcheck // closing the session releases it anyway

	var ready bool
	err = admin.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = $1 AND datistemplate)", name).Scan(&ready)
	if err != nil || ready {
		return name, err
	}
	// A build that died half-way leaves a database not yet marked as template.
	if _, err := admin.Exec(ctx, "DROP DATABASE IF EXISTS "+name+" WITH (FORCE)"); err != nil {
		return "", fmt.Errorf("drop unfinished template: %w", err)
	}
	if _, err := admin.Exec(ctx, "CREATE DATABASE "+name); err != nil {
		return "", fmt.Errorf("create template: %w", err)
	}
	u, err := withDatabase(ServerURL(), name)
	if err != nil {
		return "", err
	}
	conn, err := pgx.Connect(ctx, u)
	if err != nil {
		return "", fmt.Errorf("connect to template: %w", err)
	}
	_, err = migrations.Migrate(ctx, conn)
	conn.Close(ctx)
	if err != nil {
		return "", fmt.Errorf("migrate template: %w", err)
	}
	if _, err := admin.Exec(ctx, "ALTER DATABASE "+name+" WITH is_template true"); err != nil {
		return "", fmt.Errorf("mark template: %w", err)
	}
	if !dropOld {
		return name, nil
	}
	return name, dropOldTemplates(ctx, admin, name)
}

// dropOldTemplates drops templates built from earlier versions of the
// migrations, so that changing a migration does not leave a database behind.
func dropOldTemplates(ctx context.Context, admin *pgx.Conn, keep string) error {
	rows, err := admin.Query(ctx, "SELECT datname FROM pg_database WHERE datname LIKE 'oncerun\\_template\\_%' AND datname <> $1", keep)
	if err != nil {
		return fmt.Errorf("list old templates: %w", err)
	}
	old, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return fmt.Errorf("list old templates: %w", err)
	}
	for _, name := range old {
		ident := pgx.Identifier{name}.Sanitize()
		if _, err := admin.Exec(ctx, "ALTER DATABASE "+ident+" WITH is_template false"); err != nil {
			return fmt.Errorf("unmark old template %s: %w", name, err)
		}
		if _, err := admin.Exec(ctx, "DROP DATABASE "+ident+" WITH (FORCE)"); err != nil {
			return fmt.Errorf("drop old template %s: %w", name, err)
		}
	}
	return nil
}

// withDatabase returns the URL serverURL with its database replaced by name.
func withDatabase(serverURL, name string) (string, error) {
	u, err := url.Parse(serverURL)
	if err != nil || (u.Scheme != "postgres" && u.Scheme != "postgresql") {
		return "", fmt.Errorf("DATABASE_URL %q is not a postgres:// URL", serverURL)
	}
	u.Path = "/" + name
	return u.String(), nil
}
