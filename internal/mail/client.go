package mail

import (
	"context"
	"fmt"
	"net"
	netmail "net/mail"
	"time"
)

// Client sends mail through one SMTP server. It is safe for concurrent use:
// every Send opens its own connection.
type Client struct {
	cfg  Config
	from *netmail.Address
	host string // host part of cfg.Addr, the default TLS server name
}

// New returns a Client for cfg after applying its defaults and checking it.
func New(cfg Config) (*Client, error) {
	cfg = cfg.WithDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	from, err := parseAddress(cfg.From)
	if err != nil {
		return nil, fmt.Errorf("mail config: From: %w", err)
	}
	host, _, err := net.SplitHostPort(cfg.Addr)
	if err != nil {
		return nil, fmt.Errorf("mail config: Addr %q: %w", cfg.Addr, err)
	}
	return &Client{cfg: cfg, from: from, host: host}, nil
}

// Receipt describes a message the server accepted.
type Receipt struct {
	// MessageID is the Message-ID header that was sent.
	MessageID string
	// To holds the envelope recipients, bare addresses.
	To []string
	// Reply is the server's reply text to the end of DATA, often carrying a
	// queue id. It may be empty.
	Reply string
}

// Send delivers m to the server and returns once the server has accepted it.
// Every error wraps exactly one of ErrNotSent (ErrRejected counts as not
// sent) or ErrUnknown; see the package documentation for when each applies.
// The message is checked before dialing, so a malformed message fails with
// ErrNotSent without touching the network. When ctx is done the connection
// is closed, and the error is classified by how far the exchange had got.
func (c *Client) Send(ctx context.Context, m Message) (Receipt, error) {
	env, err := buildEnvelope(c.from, m, time.Now())
	if err != nil {
		return Receipt{}, fmt.Errorf("%w: invalid message: %w", ErrNotSent, err)
	}
	s, err := c.open(ctx)
	if err != nil {
		return Receipt{}, err
	}
	defer s.close()
	reply, err := s.transfer(env)
	if err != nil {
		return Receipt{}, err
	}
	return Receipt{MessageID: env.messageID, To: env.to, Reply: reply}, nil
}
