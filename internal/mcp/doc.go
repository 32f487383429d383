// Package mcp turns the tools of MCP servers (Model Context Protocol) into
// oncerun tools, so that an agent's calls of them run as numbered steps
// under idempotency keys like any other external effect.
//
// # Configuration
//
// A file named by ONCERUN_MCP_CONFIG ([ConfigEnv]), JSON or YAML, lists the
// servers ([Config]): how to reach each (Streamable HTTP or a child process
// over stdio) and, for each MCP tool to expose, what MCP cannot say of it:
// its effect class, approval rule, retention, paired read and whether the
// server honours the idempotency key. [LoadConfig] reads it strictly.
//
// # Discovery
//
// [Load] connects to every server, lists its tools and makes one
// tools.Tool per exposed MCP tool, named "<server>_<tool>", with the MCP
// input schema as its argument schema. The sessions stay open for the
// calls, and a session that ends (a restarted server, an exited process)
// is opened again on the next call.
//
// # Calls
//
// A tool's Run sends tools/call with the step's key in the request's _meta
// as [MetaIdempotencyKey] and, over HTTP, as the Idempotency-Key header.
// Failures are classified for the dedup store: a request that never reached
// the server is tools.ErrNotApplied; an error result (isError) is a
// definite failure, permanent and not applied; a failure after the request
// was sent leaves the outcome unknown, for the paired read or a person to
// settle. A server that honours the key makes its tool's effect once;
// otherwise the promise is at-least-once unless a paired read can tell.
// Over HTTP the bearer token, the URL's credentials and the key reach the
// configured origin only: a redirect is followed only to it, and only as a
// 307 or 308 (a refused 307 or 308 is not applied; a refused 301, 302 or
// 303 leaves the outcome unknown). A result is kept as the server wrote it,
// numbers included, or the step asks its paired read or a person (see
// structured).
package mcp
