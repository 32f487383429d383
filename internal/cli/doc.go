// Package cli is the oncerun command line: migrate the database, start runs,
// read their status, list and decide the steps waiting for approval, set
// the money limits on a tenant's tools. The
// commands cmd/oncerun and cmd/oncerun-dev are thin mains around [NewRoot].
package cli
