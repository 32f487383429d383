package integration

import (
	"net/url"
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.yaml.in/yaml/v3"

	"github.com/oncerun/oncerun/internal/host"
)

// composeFile is the part of docker-compose.yml that oncerun relies on.
type composeFile struct {
	Services map[string]struct {
		Image       string            `yaml:"image"`
		Environment map[string]string `yaml:"environment"`
		Ports       []string          `yaml:"ports"`
		Healthcheck struct {
			Test []string `yaml:"test"`
		} `yaml:"healthcheck"`
	} `yaml:"services"`
}

// TestComposePostgresMatchesDefaultURL checks that `docker compose up -d
// postgres` gives a server that the CLI's default DATABASE_URL reaches. No
// Docker engine is needed: the file is read, not run.
func TestComposePostgresMatchesDefaultURL(t *testing.T) {
	t.Parallel()
	raw, err := os.ReadFile("../../docker-compose.yml")
	require.NoError(t, err)
	var f composeFile
	require.NoError(t, yaml.Unmarshal(raw, &f))
	pg, ok := f.Services["postgres"]
	require.True(t, ok, "docker-compose.yml has a postgres service")

	image, tag, _ := strings.Cut(pg.Image, ":")
	assert.Equal(t, "postgres", image)
	major, err := strconv.Atoi(strings.SplitN(tag, ".", 2)[0])
	require.NoError(t, err, "postgres image %q has a numeric major version tag", pg.Image)
	assert.GreaterOrEqual(t, major, 13, "oncerun needs PostgreSQL 13 or later")

	u, err := url.Parse(host.DefaultDatabaseURL)
	require.NoError(t, err)
	assert.Contains(t, pg.Ports, u.Hostname()+":"+u.Port()+":5432", "the default URL's host and port are published")
	assert.Equal(t, u.User.Username(), pg.Environment["POSTGRES_USER"])
	assert.Equal(t, strings.TrimPrefix(u.Path, "/"), pg.Environment["POSTGRES_DB"])
	_, hasPassword := u.User.Password()
	if !hasPassword {
		assert.Equal(t, "trust", pg.Environment["POSTGRES_HOST_AUTH_METHOD"], "the default URL has no password")
	}
	assert.NotEmpty(t, pg.Healthcheck.Test, "a healthcheck lets `docker compose up --wait` wait for the server")
}
