package mail

import (
	"context"
	"crypto/tls"
	"errors"
	"net"

	"github.com/emersion/go-sasl"
	"github.com/emersion/go-smtp"
)

// session is one SMTP connection. Its network I/O stops when its context is
// done, because the connection is then closed.
type session struct {
	ctx  context.Context
	conn net.Conn
	smtp *smtp.Client
	tls  bool
	stop func() bool // unregisters the close on context done
}

// open connects, greets, upgrades to TLS when the server offers STARTTLS and
// authenticates when the config has credentials. Every failure is
// ErrNotSent: no message has been offered yet.
func (c *Client) open(ctx context.Context) (*session, error) {
	s, err := c.dial(ctx)
	if err != nil {
		return nil, err
	}
	s.smtp = smtp.NewClient(s.conn)
	if err := s.smtp.Hello(c.cfg.HelloName); err != nil {
		s.close()
		return nil, s.fail(ErrNotSent, "ehlo", err)
	}
	if ok, _ := s.smtp.Extension("STARTTLS"); ok {
		// go-smtp issues STARTTLS only on a fresh client, so leave this
		// connection and open one that starts with it.
		_ = s.smtp.Quit()
		s.close()
		if s, err = c.openTLS(ctx); err != nil {
			return nil, err
		}
	}
	if err := c.auth(s); err != nil {
		s.close()
		return nil, err
	}
	return s, nil
}

// dial opens the TCP connection within DialTimeout and ctx.
func (c *Client) dial(ctx context.Context) (*session, error) {
	d := net.Dialer{Timeout: c.cfg.DialTimeout}
	conn, err := d.DialContext(ctx, "tcp", c.cfg.Addr)
	if err != nil {
		return nil, classify(ctx, ErrNotSent, "dial", err)
	}
	stop := context.AfterFunc(ctx, func() { _ = conn.Close() })
	return &session{ctx: ctx, conn: conn, stop: stop}, nil
}

// openTLS dials again and upgrades with STARTTLS before anything else.
func (c *Client) openTLS(ctx context.Context) (*session, error) {
	s, err := c.dial(ctx)
	if err != nil {
		return nil, err
	}
	s.smtp, err = smtp.NewClientStartTLS(s.conn, c.tlsConfig())
	if err != nil {
		s.close()
		return nil, s.fail(ErrNotSent, "starttls", err)
	}
	// The TLS handshake runs when this EHLO is written.
	if err := s.smtp.Hello(c.cfg.HelloName); err != nil {
		s.close()
		return nil, s.fail(ErrNotSent, "tls handshake and ehlo", err)
	}
	s.tls = true
	return s, nil
}

// tlsConfig returns the STARTTLS config, verifying against the Addr host
// unless the configured ServerName says otherwise.
func (c *Client) tlsConfig() *tls.Config {
	cfg := &tls.Config{MinVersion: tls.VersionTLS12}
	if c.cfg.TLSConfig != nil {
		cfg = c.cfg.TLSConfig.Clone()
	}
	if cfg.ServerName == "" {
		cfg.ServerName = c.host
	}
	return cfg
}

// auth sends AUTH PLAIN when credentials are configured, but never in
// plaintext to a host that is not loopback.
func (c *Client) auth(s *session) error {
	if c.cfg.Username == "" {
		return nil
	}
	if !s.tls && !s.loopback() {
		return s.fail(ErrNotSent, "auth", errors.New("server offers no STARTTLS; refusing to send credentials in plaintext"))
	}
	if !s.smtp.SupportsAuth(sasl.Plain) {
		return s.fail(ErrNotSent, "auth", errors.New("server does not offer AUTH PLAIN"))
	}
	if err := s.smtp.Auth(sasl.NewPlainClient("", c.cfg.Username, c.cfg.Password)); err != nil {
		return s.fail(ErrNotSent, "auth", err)
	}
	return nil
}

// transfer runs MAIL FROM, RCPT TO and DATA and returns the server's reply
// text to the end of DATA.
func (s *session) transfer(env envelope) (string, error) {
	if err := s.smtp.Mail(env.from, nil); err != nil {
		return "", s.fail(ErrNotSent, "mail from", err)
	}
	for _, to := range env.to {
		if err := s.smtp.Rcpt(to, nil); err != nil {
			return "", s.fail(ErrNotSent, "rcpt to "+to, err)
		}
	}
	w, err := s.smtp.Data()
	if err != nil {
		return "", s.fail(ErrNotSent, "data", err)
	}
	if _, err := w.Write(env.data); err != nil {
		// Only Close writes the terminating dot, and a server must drop a
		// message whose dot never came.
		return "", s.fail(ErrNotSent, "write body", err)
	}
	resp, err := w.CloseWithResponse()
	if err != nil {
		return s.endOfData(err)
	}
	s.quit()
	return resp.StatusText, nil
}

// endOfData classifies a failure to read a 250 reply after the terminating
// dot: a 2xx reply still means accepted, 4xx and 5xx mean rejected, and
// anything else leaves the outcome unknown.
func (s *session) endOfData(err error) (string, error) {
	var reply *smtp.SMTPError
	if errors.As(err, &reply) {
		switch reply.Code / 100 {
		case 2:
			s.quit()
			return reply.Message, nil
		case 4, 5:
			return "", s.fail(ErrRejected, "end of data", err)
		}
	}
	return "", s.fail(ErrUnknown, "end of data", err)
}

// quit ends an exchange whose message the server already accepted. Its error
// is dropped on purpose: a failed QUIT cannot undo the acceptance.
func (s *session) quit() {
	_ = s.smtp.Quit()
}

// loopback reports whether the peer is a loopback address.
func (s *session) loopback() bool {
	a, ok := s.conn.RemoteAddr().(*net.TCPAddr)
	return ok && a.IP.IsLoopback()
}

// fail classifies err as class at step.
func (s *session) fail(class error, step string, err error) error {
	return classify(s.ctx, class, step, err)
}

// close releases the connection; it is safe to call more than once.
func (s *session) close() {
	s.stop()
	_ = s.conn.Close()
}
