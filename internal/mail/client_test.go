package mail_test

import (
	"context"
	"errors"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/emersion/go-smtp"
	"github.com/stretchr/testify/require"

	"github.com/oncerun/oncerun/internal/mail"
	"github.com/oncerun/oncerun/internal/mail/mailtest"
)

// setup starts a mail server with srvCfg and returns it with a client whose
// config is cfg pointed at that server.
func setup(t *testing.T, srvCfg mailtest.Config, cfg mail.Config) (*mailtest.Server, *mail.Client) {
	t.Helper()
	srv, err := mailtest.Start(srvCfg)
	require.NoError(t, err)
	t.Cleanup(func() { _ = srv.Close() })
	cfg.Addr = srv.Addr()
	c, err := mail.New(cfg)
	require.NoError(t, err)
	return srv, c
}

// message returns a message for the step key.
func message(key string) mail.Message {
	return mail.Message{
		To:        []string{"ops@example.com"},
		Subject:   "Refund approved",
		Body:      "The refund was issued.\n",
		MessageID: mail.MessageID(key, "oncerun.test"),
	}
}

func TestSendDeliversOnce(t *testing.T) {
	t.Parallel()
	srv, c := setup(t, mailtest.Config{}, mail.Config{From: "Oncerun <agent@oncerun.test>"})
	body := "Grüße from run 42.\nTotal = 12.50 €\n.a line starting with a dot\n" +
		strings.Repeat("long line ", 20) + "\n"
	m := mail.Message{
		To:        []string{"ops@example.com", "Zoë <zoe@example.com>"},
		Subject:   "Rückerstattung für Bestellung №42 genehmigt ✓",
		Body:      body,
		MessageID: mail.MessageID("run-42/step-7", "oncerun.test"),
	}

	rcpt, err := c.Send(t.Context(), m)

	require.NoError(t, err)
	require.Equal(t, m.MessageID, rcpt.MessageID)
	require.Equal(t, []string{"ops@example.com", "zoe@example.com"}, rcpt.To)
	require.NotEmpty(t, rcpt.Reply)
	got := srv.Messages()
	require.Len(t, got, 1)
	require.Equal(t, "agent@oncerun.test", got[0].From)
	require.Equal(t, []string{"ops@example.com", "zoe@example.com"}, got[0].To)
	require.Equal(t, m.MessageID, got[0].MessageID)
	require.Equal(t, m.Subject, got[0].Subject)
	require.Equal(t, body, got[0].Body)
	require.Equal(t, "1.0", got[0].Header.Get("MIME-Version"))
	require.Equal(t, "text/plain; charset=utf-8", got[0].Header.Get("Content-Type"))
	require.Equal(t, "quoted-printable", got[0].Header.Get("Content-Transfer-Encoding"))
	to, err := got[0].Header.AddressList("To")
	require.NoError(t, err)
	require.Len(t, to, 2)
	date, err := got[0].Header.Date()
	require.NoError(t, err)
	require.WithinDuration(t, time.Now(), date, time.Minute)
	for i, line := range strings.Split(string(got[0].Data), "\r\n") {
		require.LessOrEqual(t, len(line), 78, "line %d: %q", i, line)
		for _, r := range line {
			require.Less(t, r, rune(128), "line %d is not ASCII: %q", i, line)
		}
	}
}

func TestSendRefusesInvalidMessageBeforeDialing(t *testing.T) {
	t.Parallel()
	tests := map[string]func(*mail.Message){
		"CR LF in subject":     func(m *mail.Message) { m.Subject = "Hi\r\nBcc: victim@example.com" },
		"LF in subject":        func(m *mail.Message) { m.Subject = "Hi\nBcc: victim@example.com" },
		"CR LF in recipient":   func(m *mail.Message) { m.To = []string{"ops@example.com\r\nRCPT TO:<x@evil.test>"} },
		"bad recipient":        func(m *mail.Message) { m.To = []string{"not an address"} },
		"no recipient":         func(m *mail.Message) { m.To = nil },
		"LF in message id":     func(m *mail.Message) { m.MessageID = "<a@b>\nBcc: victim@example.com" },
		"malformed message id": func(m *mail.Message) { m.MessageID = "no-brackets@b" },
	}
	for name, mutate := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			srv, c := setup(t, mailtest.Config{}, mail.Config{})
			m := message("step")
			mutate(&m)

			_, err := c.Send(t.Context(), m)

			require.ErrorIs(t, err, mail.ErrNotSent)
			require.NotErrorIs(t, err, mail.ErrRejected)
			require.Zero(t, srv.Connections())
			require.Empty(t, srv.Messages())
		})
	}
}

func TestSendConnectionRefused(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	require.NoError(t, ln.Close())
	c, err := mail.New(mail.Config{Addr: addr})
	require.NoError(t, err)

	_, err = c.Send(t.Context(), message("step"))

	require.ErrorIs(t, err, mail.ErrNotSent)
	require.NotErrorIs(t, err, mail.ErrUnknown)
}

func TestSendCanceledContextIsNotSent(t *testing.T) {
	t.Parallel()
	srv, c := setup(t, mailtest.Config{}, mail.Config{})
	ctx, cancel := context.WithCancel(t.Context())
	cancel()

	_, err := c.Send(ctx, message("step"))

	require.ErrorIs(t, err, mail.ErrNotSent)
	require.ErrorIs(t, err, context.Canceled)
	require.Empty(t, srv.Messages())
}

func TestSendRcptRejectedIsNotSent(t *testing.T) {
	t.Parallel()
	srv, c := setup(t, mailtest.Config{}, mail.Config{})
	srv.RejectRcpt(1)

	_, err := c.Send(t.Context(), message("step"))

	require.ErrorIs(t, err, mail.ErrNotSent)
	require.NotErrorIs(t, err, mail.ErrRejected)
	requireReplyCode(t, err, 550)
	require.Empty(t, srv.Messages())
}

func TestSendDataRejected(t *testing.T) {
	t.Parallel()
	srv, c := setup(t, mailtest.Config{}, mail.Config{})
	srv.RejectData(1)

	_, err := c.Send(t.Context(), message("step"))

	require.ErrorIs(t, err, mail.ErrRejected)
	require.ErrorIs(t, err, mail.ErrNotSent)
	require.NotErrorIs(t, err, mail.ErrUnknown)
	requireReplyCode(t, err, 554)
	require.Empty(t, srv.Messages())
}

func TestSendDropAfterAcceptIsUnknown(t *testing.T) {
	t.Parallel()
	srv, c := setup(t, mailtest.Config{}, mail.Config{})
	srv.DropAfterAccept(1)
	m := message("step")

	_, err := c.Send(t.Context(), m)

	require.ErrorIs(t, err, mail.ErrUnknown)
	require.NotErrorIs(t, err, mail.ErrNotSent)
	got := srv.Messages()
	require.Len(t, got, 1)
	require.Equal(t, m.MessageID, got[0].MessageID)
}

func TestSendTimeoutAwaitingReplyIsUnknown(t *testing.T) {
	t.Parallel()
	srv, c := setup(t, mailtest.Config{}, mail.Config{})
	srv.StallAfterAccept(1)
	ctx, cancel := context.WithTimeout(t.Context(), 300*time.Millisecond)
	defer cancel()

	done := make(chan error, 1)
	go func() {
		_, err := c.Send(ctx, message("step"))
		done <- err
	}()
	var err error
	select {
	case err = <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("Send ignored the context deadline")
	}

	require.ErrorIs(t, err, mail.ErrUnknown)
	require.ErrorIs(t, err, context.DeadlineExceeded)
	require.Len(t, srv.Messages(), 1)
}

func TestSendDropAfterReplyIsSuccess(t *testing.T) {
	t.Parallel()
	srv, c := setup(t, mailtest.Config{}, mail.Config{})
	srv.DropAfterReply(1)
	m := message("step")

	rcpt, err := c.Send(t.Context(), m)

	require.NoError(t, err)
	require.Equal(t, m.MessageID, rcpt.MessageID)
	require.Len(t, srv.Messages(), 1)
}

func TestSendAuth(t *testing.T) {
	t.Parallel()
	tests := map[string]struct {
		username, password string
		code               int // expected reply code; 0 means sent
	}{
		"right credentials": {username: "agent", password: "s3cret"},
		"wrong password":    {username: "agent", password: "wrong", code: 535},
		"no credentials":    {code: 502},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			srv, c := setup(t,
				mailtest.Config{Username: "agent", Password: "s3cret", AllowInsecureAuth: true},
				mail.Config{Username: tt.username, Password: tt.password})

			_, err := c.Send(t.Context(), message("step"))

			if tt.code == 0 {
				require.NoError(t, err)
				require.Len(t, srv.Messages(), 1)
				return
			}
			require.ErrorIs(t, err, mail.ErrNotSent)
			requireReplyCode(t, err, tt.code)
			require.Empty(t, srv.Messages())
		})
	}
}

func TestSendRefusesPlaintextCredentialsToRemoteHost(t *testing.T) {
	t.Parallel()
	ip := nonLoopbackIP(t)
	srv, err := mailtest.Start(mailtest.Config{
		Addr:     net.JoinHostPort(ip.String(), "0"),
		Username: "agent", Password: "s3cret", AllowInsecureAuth: true,
	})
	require.NoError(t, err)
	t.Cleanup(func() { _ = srv.Close() })
	c, err := mail.New(mail.Config{Addr: srv.Addr(), Username: "agent", Password: "s3cret"})
	require.NoError(t, err)

	_, err = c.Send(t.Context(), message("step"))

	require.ErrorIs(t, err, mail.ErrNotSent)
	require.ErrorContains(t, err, "plaintext")
	require.Empty(t, srv.Messages())
}

// nonLoopbackIP returns an IPv4 address of this machine that is not
// loopback, or skips the test.
func nonLoopbackIP(t *testing.T) net.IP {
	t.Helper()
	addrs, err := net.InterfaceAddrs()
	require.NoError(t, err)
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok && !n.IP.IsLoopback() && n.IP.To4() != nil {
			return n.IP
		}
	}
	t.Skip("no non-loopback IPv4 address on this machine")
	return nil
}

// requireReplyCode checks that err carries the server reply code.
func requireReplyCode(t *testing.T, err error, code int) {
	t.Helper()
	var reply *smtp.SMTPError
	require.True(t, errors.As(err, &reply), "no SMTP reply in %v", err)
	require.Equal(t, code, reply.Code)
}
