package migrations

import (
	"context"
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"fmt"
	"io/fs"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/tern/v2/migrate"
)

//go:embed *.sql
var files embed.FS

// VersionTable is the table in which the applied schema version is recorded.
const VersionTable = "public.schema_version"

// Files returns the embedded migration files.
func Files() fs.FS { return files }

// Result reports what [Migrate] did.
type Result struct {
	// Applied names the migrations this call applied, in order; empty when the
	// schema was already current (or another process brought it up to date
	// while this one waited for the lock).
	Applied []string
	// Version is the schema version after migrating.
	Version int32
}

// Migrate brings the database conn is connected to up to the latest schema
// version. It is safe to call from several processes at once. conn must not be
// in a transaction: the advisory lock is held on its session.
func Migrate(ctx context.Context, conn *pgx.Conn) (Result, error) {
	m, err := migrate.NewMigrator(ctx, conn, VersionTable)
	if err != nil {
		return Result{}, fmt.Errorf("prepare migrator: %w", err)
	}
	if err := m.LoadMigrations(files); err != nil {
		return Result{}, fmt.Errorf("load migrations: %w", err)
	}
	var res Result
	m.OnStart = func(_ int32, name, _, _ string) { res.Applied = append(res.Applied, name) }
	if err := m.Migrate(ctx); err != nil {
		return res, fmt.Errorf("migrate: %w", err)
	}
	if res.Version, err = m.GetCurrentVersion(ctx); err != nil {
		return res, fmt.Errorf("read schema version: %w", err)
	}
	return res, nil
}

// Fingerprint returns a hex digest of every migration file's name and content.
// Test harnesses use it to name a migrated template database, so a changed
// migration never reuses a template built from the old one.
func Fingerprint() string {
	h := sha256.New()
	entries, err := fs.ReadDir(files, ".")
	if err != nil {
		// The embedded directory always exists; a failure here is a build defect.
		panic(fmt.Sprintf("read embedded migrations: %v", err))
	}
	for _, e := range entries {
		b, err := fs.ReadFile(files, e.Name())
		if err != nil {
			panic(fmt.Sprintf("read embedded migration %s: %v", e.Name(), err))
		}
		fmt.Fprintf(h, "%s\x00%d\x00", e.Name(), len(b))
		h.Write(b)
	}
	return hex.EncodeToString(h.Sum(nil))
}
