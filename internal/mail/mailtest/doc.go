// Package mailtest runs an SMTP server in-process with an in-memory mailbox,
// for tests, the dev stack and demos.
//
// The server is github.com/emersion/go-smtp listening on loopback. It keeps
// every accepted message as a [Received], with the envelope, the raw data and
// the decoded headers and body, so a test can check that a message arrived
// exactly once.
//
// # Faults
//
// Each fault applies to the next n commands it names and then wears off:
//
//   - [Server.RejectRcpt]: RCPT TO is refused with 550.
//   - [Server.RejectData]: the message is read, not stored, and the end of
//     DATA is answered with 554.
//   - [Server.DropAfterAccept]: the message is read and stored, then the
//     connection is closed before the 250 reply, so the client cannot know
//     that it was accepted.
//   - [Server.StallAfterAccept]: the message is stored and the reply to DATA
//     is withheld until the server closes, so the client times out.
//   - [Server.DropAfterReply]: the message is stored and answered with 250,
//     then the connection is closed, so the client's QUIT fails.
//
// # Authentication
//
// With [Config.Username] set the server offers AUTH PLAIN and refuses MAIL
// FROM until the client has authenticated with the configured credentials.
// Without TLS, authentication is offered only when
// [Config.AllowInsecureAuth] is set.
package mailtest
