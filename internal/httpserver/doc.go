// Package httpserver gives every HTTP server of oncerun the same limits:
// the approvals service and inbox, the worker's /metrics and /healthz, and
// the sandboxes of the development stack.
//
// # Limits
//
// A server built by [New] reads a request's headers within 10 s and the
// whole request within 30 s, writes its response within 60 s of the
// request's headers (a server that streams, or holds answers back on
// purpose, opts out), closes a keep-alive connection idle for 60 s, answers
// headers larger than 32 KiB with 431, and has at most 1,024 connections
// open at once. Connections beyond the cap are not refused: they wait in
// the kernel's accept queue until one closes, so that a flood of idle
// clients slows the server down instead of using up its file descriptors.
// See [Config] for each default.
package httpserver
