// Package questions carries what a tool's server asks a person in the
// middle of a call (an MCP server's elicitation), and the person's answer,
// between the MCP client, the activities, the run, the approvals service
// and the inbox.
//
// # Two ways to ask
//
// A server of the 2026-07-28 protocol answers the call with its questions
// (an input-required result) and a request state to send back: nothing is
// completed, and the call is sent again with the answers. The question
// travels as the step's [Asked] through the run's history, so it waits
// durably, for days if need be, and any worker sends the answer.
//
// A server of an earlier protocol asks over the live session
// (elicitation/create) while the call is in flight. Only the worker that
// holds the session can answer it: the question waits in the inbox while
// that worker lives ([Live]), and is lost if it dies, leaving the call's
// outcome unknown.
//
// # What is checked
//
// A server is not trusted: [Asked.Validate] bounds what it asked (how many
// questions, their text, their schemas, a URL), and [Asked.Check] holds an
// answer to the server's schema before anything is sent back.
package questions
