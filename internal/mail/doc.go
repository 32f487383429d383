// Package mail sends e-mail over SMTP and says, for every failure, whether the
// message can have reached the server.
//
// An agent run that sends mail must know after a crash or an error whether
// the side effect happened. [Client.Send] speaks SMTP through
// github.com/emersion/go-smtp and classifies every error at the step where it
// happens, so the caller can retry safely, give up, or ask a human.
//
// # Outcomes
//
// Send ends in exactly one of four ways:
//
//   - nil error: the server answered 2xx to the end of DATA and took the
//     message. Anything that fails afterwards (QUIT, a dropped connection) is
//     ignored, because the message is already accepted.
//   - [ErrNotSent]: nothing was handed to the server. The message was refused
//     locally before dialing (bad address, CR or LF in a header), or the
//     dial, EHLO, STARTTLS, TLS handshake, AUTH, MAIL FROM, RCPT TO or DATA
//     command failed, or the body could not be written before its
//     terminating dot. Retrying is safe.
//   - [ErrRejected]: the server read the message and answered the end of DATA
//     with a 4xx or 5xx reply, so it did not take it. errors.Is(err,
//     ErrNotSent) is true as well. Retrying is safe; whether it helps depends
//     on the reply code (4xx is temporary).
//   - [ErrUnknown]: the body and its terminating dot were written but the
//     server's reply never arrived (reset, timeout, EOF, context canceled).
//     The message may have been accepted.
//
// Errors wrap the underlying cause with %w, so errors.As with
// *smtp.SMTPError gives the server's reply code and text where there was one.
//
// # Duplicates
//
// A retry after ErrUnknown may deliver a second copy. [MessageID] derives the
// Message-ID header from the oncerun step key, so every attempt of one step
// carries the same id and receivers that drop duplicate Message-IDs show the
// message once.
//
// # Testing
//
// Package mailtest runs an in-process SMTP server with an in-memory mailbox
// and fault injection for each of the outcomes above.
package mail
