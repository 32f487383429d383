package integration

import (
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.yaml.in/yaml/v3"

	"github.com/oncerun/oncerun/internal/shop"
	"github.com/oncerun/oncerun/worker"
)

// composeFile is the part of docker-compose.yml that oncerun relies on.
type composeFile struct {
	Services map[string]composeService `yaml:"services"`
}

type composeService struct {
	Image string `yaml:"image"`
	Build struct {
		Context    string `yaml:"context"`
		Dockerfile string `yaml:"dockerfile"`
	} `yaml:"build"`
	Environment map[string]string `yaml:"environment"`
	Ports       []string          `yaml:"ports"`
	DependsOn   map[string]struct {
		Condition string `yaml:"condition"`
	} `yaml:"depends_on"`
	Healthcheck struct {
		Test []string `yaml:"test"`
	} `yaml:"healthcheck"`
}

func readCompose(t *testing.T) composeFile {
	t.Helper()
	raw, err := os.ReadFile("../../docker-compose.yml")
	require.NoError(t, err)
	var f composeFile
	require.NoError(t, yaml.Unmarshal(raw, &f))
	return f
}

// TestComposePostgresMatchesDefaultURL checks that `docker compose up -d
// postgres` gives a server that the CLI's default DATABASE_URL reaches. No
// Docker engine is needed: the file is read, not run.
func TestComposePostgresMatchesDefaultURL(t *testing.T) {
	t.Parallel()
	f := readCompose(t)
	pg, ok := f.Services["postgres"]
	require.True(t, ok, "docker-compose.yml has a postgres service")

	image, tag, _ := strings.Cut(pg.Image, ":")
	assert.Equal(t, "postgres", image)
	major, err := strconv.Atoi(strings.SplitN(tag, ".", 2)[0])
	require.NoError(t, err, "postgres image %q has a numeric major version tag", pg.Image)
	assert.GreaterOrEqual(t, major, 13, "oncerun needs PostgreSQL 13 or later")

	u, err := url.Parse(worker.DefaultDatabaseURL)
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

// TestComposeWorkerMatchesWhatTheWorkerReads checks the worker service
// against the binary: every variable it sets is one the worker reads, and
// the addresses point at the services of the file.
func TestComposeWorkerMatchesWhatTheWorkerReads(t *testing.T) {
	t.Parallel()
	f := readCompose(t)
	for _, name := range []string{"postgres", "temporal", "temporal-ui", "worker"} {
		require.Contains(t, f.Services, name)
	}
	w := f.Services["worker"]
	for name := range w.Environment {
		assert.Contains(t, worker.EnvNames, name, "the worker does not read %s", name)
	}
	assert.Equal(t, "Dockerfile", w.Build.Dockerfile)
	dockerfile, err := os.ReadFile(filepath.Join("../..", w.Build.Context, w.Build.Dockerfile))
	require.NoError(t, err)
	assert.Contains(t, string(dockerfile), "go build -trimpath -o /out/oncerun ./starter")
	assert.Contains(t, string(dockerfile), `ENTRYPOINT ["/usr/local/bin/oncerun", "worker"]`)

	// TEMPORAL_ADDRESS names the temporal service on the port it publishes.
	tHost, tPort, err := net.SplitHostPort(w.Environment[worker.EnvTemporalAddress])
	require.NoError(t, err)
	require.Contains(t, f.Services, tHost)
	assert.True(t, publishes(f.Services[tHost], tPort), "temporal publishes %s", tPort)
	assert.Equal(t, w.Environment[worker.EnvTemporalAddress], f.Services["temporal-ui"].Environment["TEMPORAL_ADDRESS"])

	// DATABASE_URL names the postgres service with its user and database.
	u, err := url.Parse(w.Environment[worker.EnvDatabaseURL])
	require.NoError(t, err)
	pg := f.Services[u.Hostname()]
	assert.Equal(t, "5432", u.Port())
	assert.Equal(t, pg.Environment["POSTGRES_USER"], u.User.Username())
	assert.Equal(t, pg.Environment["POSTGRES_DB"], strings.TrimPrefix(u.Path, "/"))

	// /healthz and /metrics are served where the port is published and the
	// healthcheck looks.
	_, mPort, err := net.SplitHostPort(w.Environment[worker.EnvMetricsAddr])
	require.NoError(t, err)
	assert.True(t, publishes(w, mPort))
	assert.Contains(t, strings.Join(w.Healthcheck.Test, " "), ":"+mPort+"/healthz")

	for _, dep := range []string{"postgres", "temporal"} {
		assert.Equal(t, "service_healthy", w.DependsOn[dep].Condition, "the worker waits for %s", dep)
		assert.NotEmpty(t, f.Services[dep].Healthcheck.Test, "%s has a healthcheck", dep)
	}
	if th, err := strconv.Atoi(w.Environment[worker.EnvCreditThreshold]); assert.NoError(t, err) {
		assert.EqualValues(t, shop.DefaultCreditApprovalThreshold, th)
	}
}

// publishes reports whether s publishes its container port p.
func publishes(s composeService, p string) bool {
	for _, mapping := range s.Ports {
		if strings.HasSuffix(mapping, ":"+p) {
			return true
		}
	}
	return false
}
