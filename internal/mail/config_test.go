package mail_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/oncerun/oncerun/internal/mail"
)

func TestNewRejectsBadConfig(t *testing.T) {
	t.Parallel()
	tests := map[string]struct {
		cfg   mail.Config
		field string
	}{
		"no addr":           {mail.Config{}, "Addr"},
		"addr without port": {mail.Config{Addr: "mail.example.com"}, "Addr"},
		"bad from":          {mail.Config{Addr: "localhost:25", From: "not an address"}, "From"},
		"CR LF in from":     {mail.Config{Addr: "localhost:25", From: "a@b\r\nBcc: c@d"}, "From"},
		"hello with space":  {mail.Config{Addr: "localhost:25", HelloName: "two words"}, "HelloName"},
		"password only":     {mail.Config{Addr: "localhost:25", Password: "x"}, "Password"},
		"negative timeout":  {mail.Config{Addr: "localhost:25", DialTimeout: -1}, "DialTimeout"},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			_, err := mail.New(tt.cfg)
			require.ErrorContains(t, err, tt.field)
		})
	}
}

func TestConfigWithDefaults(t *testing.T) {
	t.Parallel()
	cfg := mail.Config{Addr: "localhost:25"}.WithDefaults()

	require.Equal(t, mail.DefaultFrom, cfg.From)
	require.Equal(t, mail.DefaultHelloName, cfg.HelloName)
	require.Equal(t, mail.DefaultDialTimeout, cfg.DialTimeout)
}
