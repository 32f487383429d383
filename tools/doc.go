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
// # Built-in tools
//
// [Shop] returns the tools of the demo domain, a support agent for an online
// shop: lookup_order, get_credit, issue_credit and add_order_note.
package tools
