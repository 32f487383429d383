package mail

import (
	"cmp"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"strings"
	"time"
)

// Default values used by [Config.WithDefaults].
const (
	DefaultFrom        = "oncerun@localhost"
	DefaultHelloName   = "localhost"
	DefaultDialTimeout = 10 * time.Second
)

// Config configures a [Client].
type Config struct {
	// Addr is the SMTP server as host:port, usually read from SMTP_ADDR.
	// Required.
	Addr string

	// Username and Password, when Username is set, are sent with AUTH PLAIN.
	// They are sent only over TLS, or in plaintext when the server's address
	// is a loopback address; otherwise Send fails with ErrNotSent before
	// AUTH.
	Username string
	Password string

	// From is the envelope sender and the From header, as "addr@host" or
	// "Name <addr@host>". Default DefaultFrom.
	From string

	// HelloName is the name sent with EHLO. Default DefaultHelloName.
	HelloName string

	// DialTimeout bounds the TCP connect. Default DefaultDialTimeout. The
	// context given to Send bounds the whole exchange.
	DialTimeout time.Duration

	// TLSConfig is used for STARTTLS, which Send uses whenever the server
	// offers it. Default: verify the certificate against the host in Addr.
	// An empty ServerName is filled with that host.
	TLSConfig *tls.Config
}

// WithDefaults returns a copy of c with empty fields set to their defaults.
func (c Config) WithDefaults() Config {
	c.From = cmp.Or(c.From, DefaultFrom)
	c.HelloName = cmp.Or(c.HelloName, DefaultHelloName)
	c.DialTimeout = cmp.Or(c.DialTimeout, DefaultDialTimeout)
	return c
}

// validate checks a config that already has its defaults.
func (c Config) validate() error {
	if c.Addr == "" {
		return errors.New("mail config: Addr is required")
	}
	if _, _, err := net.SplitHostPort(c.Addr); err != nil {
		return fmt.Errorf("mail config: Addr %q: %w", c.Addr, err)
	}
	if _, err := parseAddress(c.From); err != nil {
		return fmt.Errorf("mail config: From: %w", err)
	}
	if c.HelloName == "" || strings.ContainsAny(c.HelloName, " \t\r\n") {
		return fmt.Errorf("mail config: HelloName %q: must be one word", c.HelloName)
	}
	if c.DialTimeout < 0 {
		return fmt.Errorf("mail config: DialTimeout %s: must not be negative", c.DialTimeout)
	}
	if c.Username == "" && c.Password != "" {
		return errors.New("mail config: Password is set without Username")
	}
	return nil
}
