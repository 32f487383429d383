package mail_test

import (
	"regexp"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/oncerun/oncerun/internal/mail"
)

func TestMessageIDIsStablePerKey(t *testing.T) {
	t.Parallel()
	id := mail.MessageID("run-1/step-3", "oncerun.test")

	require.Equal(t, id, mail.MessageID("run-1/step-3", "oncerun.test"))
	require.NotEqual(t, id, mail.MessageID("run-1/step-4", "oncerun.test"))
	require.NotEqual(t, id, mail.MessageID("run-2/step-3", "oncerun.test"))
	require.Regexp(t, regexp.MustCompile(`^<[0-9a-f]{32}@oncerun\.test>$`), id)
	// Pinned: a change here would give retries of old steps new ids.
	require.Equal(t, "<d1a605ce5275ce2a45a471c5a592456a@oncerun.test>", id)
}

func TestMessageIDDefaultsDomain(t *testing.T) {
	t.Parallel()
	require.Regexp(t, `@localhost>$`, mail.MessageID("k", ""))
}
