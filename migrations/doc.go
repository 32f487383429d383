// Package migrations holds oncerun's PostgreSQL schema as numbered SQL files
// embedded into the binary, and applies them.
//
// Files are named NNN_description.sql; the part above the line
// "---- create above / drop below ----" migrates up, the part below undoes it.
// [Migrate] applies every pending file in order, each in its own transaction,
// and records the version in the schema_version table. It holds a PostgreSQL
// advisory lock while it works, so several workers starting at once apply each
// migration exactly once and the others wait, then find nothing to do.
//
// Migrations are applied by github.com/jackc/tern/v2/migrate.
package migrations
