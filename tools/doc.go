// Package tools defines what an agent may do: each [Tool] has a name, a JSON
// Schema for its arguments, an effect class, an approval rule, a retention
// window, a timeout and, for external effects, a paired read. A [Registry]
// holds the tools a worker serves and is validated when the worker starts.
//
// # Effect classes
//
//   - [ClassRead] tools have no effect and no key.
//   - [ClassNatural] tools write a row whose natural key (a unique constraint)
//     makes the effect once forever; they run inside the step key's
//     transaction so that a replay returns the first result.
//   - [ClassKeyed] tools write rows with no natural key; the step's dedup row
//     and the effect commit in one transaction.
//   - [ClassExternal] tools leave the database; the key is leased first and
//     sent to the provider as its idempotency key, and an unknown outcome is
//     resolved by the tool's paired read.
//
// This package is what a tool's author needs and nothing else: the demo
// domain's tools are in internal/shop, the payment and e-mail tools beside
// their clients, and all of them are built on this API as a deployment's own
// tools are. worker.Config.Tools adds a deployment's tools to the one
// registry every entry point uses.
package tools
