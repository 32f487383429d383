package untrusted

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

// secretParams are the parts of query parameter names that say the value
// is a credential: password, sslpassword, token, access_token, api_key,
// apikey, client_secret, sig, signature, auth, credential. Matching a part
// hides a little more than needed at worst (a signed_at is hidden too):
// too much hidden costs a little of a message, too little leaks a secret.
var secretParams = []string{"pass", "pwd", "token", "key", "secret", "sig", "auth", "credential"}

// Redact hides the credentials in a connection string or URL so that it can
// be printed or logged: the user-info password of a URL
// (postgres://u:secret@host), the values of its query parameters whose
// names hold password, pwd, token, key, secret, sig, auth or credential
// (?password=, ?token=, ?api_key=, ?sig=), and the password of a
// keyword/value string (host=db password=secret). A string that does not
// parse as a URL is redacted as text, and a query that does not parse is
// hidden whole.
func Redact(s string) string {
	if u, err := url.Parse(s); err == nil && u.Scheme != "" && u.Host != "" {
		if u.RawQuery != "" {
			u.RawQuery = redactQuery(u.RawQuery)
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

// redactQuery hides the values of the secret parameters of a query, and
// the whole query when it does not parse: what it holds cannot be told.
func redactQuery(raw string) string {
	q, err := url.ParseQuery(raw)
	if err != nil {
		return redacted
	}
	changed := false
	for k := range q {
		if secretParam(k) {
			q[k] = []string{redacted}
			changed = true
		}
	}
	if !changed {
		return raw
	}
	return q.Encode()
}

// secretParam reports whether a query parameter named name holds a
// credential.
func secretParam(name string) bool {
	name = strings.ToLower(name)
	for _, part := range secretParams {
		if strings.Contains(name, part) {
			return true
		}
	}
	return false
}
