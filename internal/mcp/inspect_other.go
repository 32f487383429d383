//go:build !linux

package mcp

// forbidInspection does nothing outside Linux: there, how far another
// process of the worker's user can read the worker's environment and
// memory is the system's own rule (docs/mcp.md).
func forbidInspection() error { return nil }
