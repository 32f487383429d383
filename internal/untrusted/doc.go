// Package untrusted holds the rules for text oncerun does not trust as it
// crosses oncerun's edge: the one validation every string and JSON document
// passes on its way in (from the approvals API, the CLI, plan files, tokens
// files and planner output), and the escaping of what goes out to a
// terminal.
//
// # Text on the way in
//
// PostgreSQL refuses a NUL character in text and "\u0000" in jsonb, and a
// string that is not UTF-8 in either; a terminal obeys escape sequences; a
// person reading a run id cannot see a zero-width space or a right-to-left
// override. So input is checked where it enters, once, by kind:
//
//   - [Text] is free text people write and read (a goal, a comment, a note):
//     valid UTF-8, no control characters but tab, newline and carriage
//     return.
//   - [Name] is an identifier people read and type (a run id, a tenant, a
//     token's name): also no invisible or format characters, no separators
//     but the ASCII space inside it, no characters that Unicode compatibility
//     normalization (NFKC) would change, such as fullwidth letters, letters
//     of one writing system (no Cyrillic а among Latin letters; Unicode's
//     "highly restrictive" level), and not ".", ".." or "/", which a URL
//     path segment cannot carry alone.
//   - [JSON] checks every string of a JSON document, names included, as
//     [Text], and bounds its nesting.
//   - [Decode] reads a JSON request body or file strictly: member names match
//     the Go field tags exactly, none appears twice, none is unknown.
//
// Refusals match [ErrInvalid] and name the field and what is wrong with it.
//
// # Text on the way out
//
// [Escape] and [TerminalWriter] make text safe to print: control and format
// characters become \u escapes such as \u001b (a form that is still valid
// inside a JSON string) and bytes that are not UTF-8 become \x escapes such
// as \xff. [Cut] shortens text on a character boundary, and [Redact] hides
// the credentials of a connection string or URL: every URL oncerun shows
// goes through it.
//
// # Requests on the way out
//
// [Redirects] says which HTTP redirects a client follows, so that a
// credential configured for one origin (a bearer token, an API key, an
// Idempotency-Key with its body) reaches no other: [SameOriginRedirects]
// or [NoRedirects], refusing the others with a [RedirectError].
package untrusted
