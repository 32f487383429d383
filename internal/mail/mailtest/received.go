package mailtest

import (
	"bytes"
	"encoding/base64"
	"io"
	"mime"
	"mime/quotedprintable"
	netmail "net/mail"
	"strings"
)

// Received is one message the server accepted.
type Received struct {
	// From is the envelope sender (MAIL FROM).
	From string
	// To holds the envelope recipients (RCPT TO).
	To []string
	// Data is the message as received, CRLF line ends, dot-stuffing undone.
	Data []byte
	// Header holds the parsed headers; empty if Data did not parse.
	Header netmail.Header
	// MessageID is the Message-ID header.
	MessageID string
	// Subject is the Subject header with RFC 2047 words decoded.
	Subject string
	// TLS reports whether the message came over a TLS connection.
	TLS bool
	// Body is the body after its Content-Transfer-Encoding is undone, with
	// CRLF turned into LF. It is the raw body if Data did not parse.
	Body string
}

// newReceived parses raw as far as it can.
func newReceived(from string, to []string, raw []byte, isTLS bool) Received {
	rec := Received{From: from, To: append([]string(nil), to...), Data: raw, Header: netmail.Header{}, TLS: isTLS}
	msg, err := netmail.ReadMessage(bytes.NewReader(raw))
	if err != nil {
		rec.Body = string(raw)
		return rec
	}
	rec.Header = msg.Header
	rec.MessageID = msg.Header.Get("Message-ID")
	rec.Subject = msg.Header.Get("Subject")
	if s, err := new(mime.WordDecoder).DecodeHeader(rec.Subject); err == nil {
		rec.Subject = s
	}
	body, err := io.ReadAll(msg.Body)
	if err != nil {
		return rec
	}
	rec.Body = strings.ReplaceAll(string(decodeBody(msg.Header, body)), "\r\n", "\n")
	return rec
}

// decodeBody undoes a quoted-printable or base64 transfer encoding, and
// returns body unchanged for any other encoding or when decoding fails.
func decodeBody(h netmail.Header, body []byte) []byte {
	var r io.Reader
	switch strings.ToLower(strings.TrimSpace(h.Get("Content-Transfer-Encoding"))) {
	case "quoted-printable":
		r = quotedprintable.NewReader(bytes.NewReader(body))
	case "base64":
		r = base64.NewDecoder(base64.StdEncoding, bytes.NewReader(body))
	default:
		return body
	}
	decoded, err := io.ReadAll(r)
	if err != nil {
		return body
	}
	return decoded
}
