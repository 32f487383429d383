package untrusted

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestRedact(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ in, want string }{
		{"postgres://app:s3cret@db:5432/oncerun?sslmode=disable", "postgres://app:xxxxx@db:5432/oncerun?sslmode=disable"},
		{"postgres://app@db/oncerun", "postgres://app@db/oncerun"},
		{"postgres://db/oncerun?user=app&password=s3cret", "postgres://db/oncerun?password=xxxxx&user=app"},
		{"host=db user=app password=s3cret dbname=oncerun", "host=db user=app password=xxxxx dbname=oncerun"},
		{"host=db password = 's3 cr\\'et' dbname=x", "host=db password = xxxxx dbname=x"},
		{"host=db sslpassword=k3y", "host=db sslpassword=xxxxx"},
		{"https://ops:pa55@approvals.example.com/", "https://ops:xxxxx@approvals.example.com/"},
		{"https://ops:pa55@exa mple.com:x/", "https://ops:xxxxx@exa mple.com:x/"},
		{"http://[::1:pw@host", "http://[:xxxxx@host"},
		{"ops:pa55@example.com", "ops:xxxxx@example.com"},
		{"postgres://app:s3cret/with?slash#@db:5432/oncerun", "postgres://app:xxxxx@db:5432/oncerun"},
	} {
		got := Redact(tc.in)
		assert.Equal(t, tc.want, got, tc.in)
		assert.NotContains(t, got, "s3cret")
		assert.NotContains(t, got, "pa55")
	}
}

func TestRedactHidesSecretQueryParameters(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ in, want string }{
		{"https://hooks.example.com/alert?token=s3cret", "https://hooks.example.com/alert?token=xxxxx"},
		{"https://mcp.example.com/mcp?api_key=s3cret&team=ops", "https://mcp.example.com/mcp?api_key=xxxxx&team=ops"},
		{"https://h.example.com/x?Access_Token=s3cret", "https://h.example.com/x?Access_Token=xxxxx"},
		{"https://h.example.com/x?sig=s3cret&client_secret=s3cret", "https://h.example.com/x?client_secret=xxxxx&sig=xxxxx"},
		{"https://u:s3cret@h.example.com/x?auth=s3cret", "https://u:xxxxx@h.example.com/x?auth=xxxxx"},
		{"https://h.example.com/x?token=s3cret%zz", "https://h.example.com/x?xxxxx"},
		{"https://h.example.com/x?team=ops&page=2", "https://h.example.com/x?team=ops&page=2"},
	} {
		got := Redact(tc.in)
		assert.Equal(t, tc.want, got, tc.in)
		assert.NotContains(t, got, "s3cret")
	}
}
