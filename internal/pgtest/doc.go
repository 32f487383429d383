// Package pgtest gives each test a PostgreSQL database of its own, created
// from a migrated template, so tests run in parallel against a real server and
// leave nothing behind.
//
// The server is the one DATABASE_URL names, or the local default
// postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable. The template
// database is named after the migrations' fingerprint, so it is built once per
// schema (under an advisory lock, as test binaries of several packages run at
// once) and rebuilt whenever a migration changes. Each test then copies it
// with CREATE DATABASE … TEMPLATE, which takes tens of milliseconds, and drops
// its copy at cleanup. Building a template drops those of other versions of
// the migrations; a test that finds its own template dropped that way (tests
// of two versions share the server) builds it again and goes on.
package pgtest
