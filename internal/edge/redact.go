package edge

import (
	"net/url"
	"regexp"
	"strings"
)

// redacted replaces a password wherever one is shown.
const redacted = "xxxxx"

var (
	// keywordPassword is a password in a keyword/value connection string:
	// password=secret or password = 'it''s \' secret'.
	keywordPassword = regexp.MustCompile(`(?i)(\b(?:ssl)?password\s*=\s*)('(?:[^'\\]|\\.|'')*'?|\S*)`)
	// userinfoPassword is the password of a URL that does not parse, with
	// or without its scheme: //user:secret@host or user:secret@host. The
	// password runs to the last @ (a password that made the URL fail to
	// parse may hold /, ? or #), so a URL with an @ further on loses more
	// than its password, never less.
	userinfoPassword = regexp.MustCompile(`(//[^/?#@:\s]*:)\S*@`)
	bareUserinfo     = regexp.MustCompile(`^([^/?#@:\s]*:)\S*@`)
)

// Redact hides the passwords in a connection string or URL so that it can
// be printed or logged: the user-info password of a URL
// (postgres://u:secret@host), a password or sslpassword query parameter,
// and the password of a keyword/value string (host=db password=secret).
// A string that does not parse as a URL is redacted as text.
func Redact(s string) string {
	if u, err := url.Parse(s); err == nil && u.Scheme != "" && u.Host != "" {
		q := u.Query()
		changed := false
		for k := range q {
			if strings.EqualFold(k, "password") || strings.EqualFold(k, "sslpassword") {
				q[k] = []string{redacted}
				changed = true
			}
		}
		if changed {
			u.RawQuery = q.Encode()
		}
		if _, has := u.User.Password(); has {
			u.User = url.UserPassword(u.User.Username(), redacted)
		}
		return u.String()
	}
	s = keywordPassword.ReplaceAllString(s, "${1}"+redacted)
	if strings.Contains(s, "//") {
		return userinfoPassword.ReplaceAllString(s, "${1}"+redacted+"@")
	}
	return bareUserinfo.ReplaceAllString(s, "${1}"+redacted+"@")
}
