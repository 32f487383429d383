package mailtest

import (
	"crypto/subtle"
	"fmt"
	"io"
	"time"

	"github.com/emersion/go-sasl"
	"github.com/emersion/go-smtp"
)

// session is the state of one SMTP connection between EHLO and the end.
type session struct {
	srv    *Server
	conn   *smtp.Conn
	authed bool
	from   string
	to     []string
	// dropOnReset closes the connection once go-smtp resets the
	// transaction, which it does right after writing the reply to DATA.
	dropOnReset bool
}

var _ smtp.AuthSession = (*session)(nil)

func (s *Server) newSession(c *smtp.Conn) (smtp.Session, error) {
	return &session{srv: s, conn: c}, nil
}

// AuthMechanisms implements smtp.AuthSession.
func (ss *session) AuthMechanisms() []string {
	if ss.srv.cfg.Username == "" {
		return nil
	}
	return []string{sasl.Plain}
}

// Auth implements smtp.AuthSession.
func (ss *session) Auth(mech string) (sasl.Server, error) {
	if ss.srv.cfg.Username == "" || mech != sasl.Plain {
		return nil, smtp.ErrAuthUnknownMechanism
	}
	return sasl.NewPlainServer(func(_, username, password string) error {
		userOK := subtle.ConstantTimeCompare([]byte(username), []byte(ss.srv.cfg.Username)) == 1
		passOK := subtle.ConstantTimeCompare([]byte(password), []byte(ss.srv.cfg.Password)) == 1
		if !userOK || !passOK {
			return smtp.ErrAuthFailed
		}
		ss.authed = true
		return nil
	}), nil
}

// Mail implements smtp.Session.
func (ss *session) Mail(from string, _ *smtp.MailOptions) error {
	if ss.srv.cfg.Username != "" && !ss.authed {
		return smtp.ErrAuthRequired
	}
	ss.from = from
	return nil
}

// Rcpt implements smtp.Session.
func (ss *session) Rcpt(to string, _ *smtp.RcptOptions) error {
	ss.srv.mu.Lock()
	reject := take(&ss.srv.faults.rejectRcpt)
	ss.srv.mu.Unlock()
	if reject {
		return &smtp.SMTPError{Code: 550, EnhancedCode: smtp.EnhancedCode{5, 1, 1}, Message: "Mailbox unavailable"}
	}
	ss.to = append(ss.to, to)
	return nil
}

// Data implements smtp.Session. It reads the whole message, up to the
// terminating dot, before deciding its fate.
func (ss *session) Data(r io.Reader) error {
	raw, err := io.ReadAll(r)
	if err != nil {
		return fmt.Errorf("read data: %w", err)
	}
	_, isTLS := ss.conn.TLSConnectionState()
	srv := ss.srv
	srv.mu.Lock()
	if take(&srv.faults.rejectData) {
		srv.mu.Unlock()
		return &smtp.SMTPError{Code: 554, EnhancedCode: smtp.EnhancedCode{5, 6, 0}, Message: "Message rejected"}
	}
	srv.messages = append(srv.messages, newReceived(ss.from, ss.to, raw, isTLS))
	drop := take(&srv.faults.dropAfterAccept)
	stall := !drop && take(&srv.faults.stallAfterAccept)
	ss.dropOnReset = !drop && !stall && take(&srv.faults.dropAfterReply)
	srv.mu.Unlock()
	switch {
	case drop:
		_ = ss.conn.Conn().Close()
	case stall:
		select {
		case <-srv.quit:
		case <-time.After(srv.cfg.Timeout):
		}
	}
	return nil
}

// Reset implements smtp.Session.
func (ss *session) Reset() {
	ss.from, ss.to = "", nil
	if ss.dropOnReset {
		ss.dropOnReset = false
		_ = ss.conn.Conn().Close()
	}
}

// Logout implements smtp.Session.
func (ss *session) Logout() error {
	return nil
}
