package mail

import (
	"bytes"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"mime"
	"mime/quotedprintable"
	netmail "net/mail"
	"regexp"
	"strings"
	"time"
	"unicode"
)

// maxSubject bounds the Subject in bytes so the header stays within the
// 998-character line limit of RFC 5322.
const maxSubject = 900

// Message is one e-mail to send.
type Message struct {
	// To lists the recipients, each as "addr@host" or "Name <addr@host>".
	// At least one is required; addresses must be ASCII.
	To []string

	// Subject is the Subject header. Non-ASCII text is RFC 2047-encoded. It
	// must not contain CR, LF or other control characters.
	Subject string

	// Body is plain UTF-8 text, sent as quoted-printable.
	Body string

	// MessageID is the Message-ID header, "<id@domain>". Set it with
	// [MessageID] so every attempt of one step carries the same id. When
	// empty, Send makes a random one and returns it in the Receipt.
	MessageID string
}

// MessageID returns a stable RFC 5322 Message-ID for an oncerun step key:
// "<", the first 32 hex digits of SHA-256(key), "@", domain, ">". The same
// key always gives the same id, so a receiver that drops duplicate
// Message-IDs shows a retried message once. An empty domain means
// "localhost".
func MessageID(key, domain string) string {
	sum := sha256.Sum256([]byte(key))
	if domain == "" {
		domain = "localhost"
	}
	return "<" + hex.EncodeToString(sum[:])[:32] + "@" + domain + ">"
}

// messageIDPattern accepts "<left@right>" without spaces or brackets inside.
var messageIDPattern = regexp.MustCompile(`^<[^<>@\s]+@[^<>@\s]+>$`)

// envelope is a message ready for the wire.
type envelope struct {
	from      string   // MAIL FROM address
	to        []string // RCPT TO addresses
	messageID string
	data      []byte // headers and quoted-printable body, CRLF line ends
}

// buildEnvelope validates m and renders it. It touches no network, so every
// error it returns means nothing was sent.
func buildEnvelope(from *netmail.Address, m Message, now time.Time) (envelope, error) {
	if len(m.To) == 0 {
		return envelope{}, errors.New("no recipients")
	}
	to := make([]*netmail.Address, 0, len(m.To))
	for _, s := range m.To {
		a, err := parseAddress(s)
		if err != nil {
			return envelope{}, fmt.Errorf("to: %w", err)
		}
		to = append(to, a)
	}
	if err := checkSubject(m.Subject); err != nil {
		return envelope{}, err
	}
	id := m.MessageID
	if id == "" {
		id = randomMessageID(from.Address)
	}
	if !messageIDPattern.MatchString(id) {
		return envelope{}, fmt.Errorf("message id %q: want <id@domain>", id)
	}

	var b bytes.Buffer
	header := func(name, value string) { b.WriteString(name + ": " + value + "\r\n") }
	header("Date", now.Format(time.RFC1123Z))
	header("From", from.String())
	header("To", joinAddresses(to))
	b.WriteString("Subject:" + encodeSubject(m.Subject) + "\r\n")
	header("Message-ID", id)
	header("MIME-Version", "1.0")
	header("Content-Type", "text/plain; charset=utf-8")
	header("Content-Transfer-Encoding", "quoted-printable")
	b.WriteString("\r\n")
	qp := quotedprintable.NewWriter(&b)
	if _, err := qp.Write([]byte(m.Body)); err != nil {
		return envelope{}, fmt.Errorf("encode body: %w", err)
	}
	if err := qp.Close(); err != nil {
		return envelope{}, fmt.Errorf("encode body: %w", err)
	}
	if !bytes.HasSuffix(b.Bytes(), []byte("\r\n")) {
		b.WriteString("\r\n")
	}

	env := envelope{from: from.Address, messageID: id, data: b.Bytes()}
	for _, a := range to {
		env.to = append(env.to, a.Address)
	}
	return env, nil
}

// parseAddress parses one ASCII address and refuses CR and LF, which would
// let a caller inject headers or SMTP commands.
func parseAddress(s string) (*netmail.Address, error) {
	if strings.ContainsAny(s, "\r\n") {
		return nil, fmt.Errorf("address %q contains CR or LF", s)
	}
	a, err := netmail.ParseAddress(s)
	if err != nil {
		return nil, fmt.Errorf("address %q: %w", s, err)
	}
	for _, r := range a.Address {
		if r > unicode.MaxASCII {
			return nil, fmt.Errorf("address %q is not ASCII", s)
		}
	}
	return a, nil
}

// checkSubject refuses CR, LF and other control characters (tab aside) and
// subjects too long for one header line.
func checkSubject(s string) error {
	if strings.ContainsAny(s, "\r\n") {
		return errors.New("subject contains CR or LF")
	}
	for _, r := range s {
		if unicode.IsControl(r) && r != '\t' {
			return fmt.Errorf("subject contains control character %U", r)
		}
	}
	if len(s) > maxSubject {
		return fmt.Errorf("subject is %d bytes, limit %d", len(s), maxSubject)
	}
	return nil
}

// encodeSubject returns the Subject header value with its leading space.
// Non-ASCII text is RFC 2047-encoded, and every encoded word goes on a line
// of its own so none grows past the 76 characters RFC 2047 allows.
func encodeSubject(s string) string {
	enc := mime.QEncoding.Encode("utf-8", s)
	if enc == s {
		return " " + s
	}
	return "\r\n " + strings.ReplaceAll(enc, "?= =?", "?=\r\n =?")
}

// joinAddresses renders a To header value, one address per folded line.
func joinAddresses(as []*netmail.Address) string {
	parts := make([]string, len(as))
	for i, a := range as {
		parts[i] = a.String()
	}
	return strings.Join(parts, ",\r\n ")
}

// randomMessageID makes a Message-ID in the domain of the sender address.
func randomMessageID(from string) string {
	domain := "localhost"
	if i := strings.LastIndexByte(from, '@'); i >= 0 && i+1 < len(from) {
		domain = from[i+1:]
	}
	return "<" + hex.EncodeToString(randomBytes(16)) + "@" + domain + ">"
}

// randomBytes returns n bytes from crypto/rand, which never fails.
func randomBytes(n int) []byte {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return b
}
