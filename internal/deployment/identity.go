package deployment

import (
	"fmt"
	"os"
	"regexp"
	"strings"
)

// Identity is the Temporal identity of a worker whose registry's short
// digest is digest: Temporal's usual <pid>@<host>@, with the digest after
// the last @, so that the pollers of a task queue say what each worker
// offers.
func Identity(digest string) string {
	host, err := os.Hostname()
	if err != nil {
		host = "Unknown"
	}
	return fmt.Sprintf("%d@%s@%s", os.Getpid(), host, digest)
}

// identityDigest matches a short registry digest at the end of an
// identity.
var identityDigest = regexp.MustCompile(`@([0-9a-f]{12})$`)

// DigestOfIdentity returns the short registry digest a worker's identity
// carries ([Identity]), or "" for an identity that carries none (another
// program's, an older worker's).
func DigestOfIdentity(identity string) string {
	if m := identityDigest.FindStringSubmatch(strings.TrimSpace(identity)); m != nil {
		return m[1]
	}
	return ""
}
