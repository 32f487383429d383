// Package approvalstest is the world the approvals service's tests run
// against, the API's (package approvals) and the inbox's alike: a database
// of their own, a Temporal that answers as runs do, tokens, and the rows a
// run writes when a step waits for a person.
package approvalstest
