// Package cli is the oncerun command line: migrate the database, start runs,
// read their status, list and decide the steps waiting for approval. The
// starter command is a thin main around [NewRoot].
package cli
