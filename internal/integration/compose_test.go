package integration

import (
	"bufio"
	"cmp"
	"fmt"
	"net"
	"net/url"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.yaml.in/yaml/v3"

	"github.com/oncerun/oncerun/internal/settings"
	"github.com/oncerun/oncerun/internal/shop"
	"github.com/oncerun/oncerun/worker"
)

// The compose files and the Dockerfile are read, not run: no Docker engine
// is needed. Each check below names what `docker compose up` would get
// wrong if it failed.

const (
	composeBase = "docker-compose.yml"
	composeTLS  = "docker-compose.tls.yml"

	imageServer     = "temporalio/server"
	imageAdminTools = "temporalio/admin-tools"
	imageUI         = "temporalio/ui"

	// grpcMetaPrefix names the variables a worker reads by prefix, as the
	// temporal CLI does: gRPC metadata sent with every call.
	grpcMetaPrefix = "TEMPORAL_GRPC_META_"
)

// composeFile is the part of a compose file that oncerun relies on.
type composeFile struct {
	Services map[string]composeService `yaml:"services"`
	Configs  map[string]struct {
		Content string `yaml:"content"`
	} `yaml:"configs"`
}

type composeService struct {
	Image string `yaml:"image"`
	Build struct {
		Context    string `yaml:"context"`
		Dockerfile string `yaml:"dockerfile"`
	} `yaml:"build"`
	Command     composeCommand     `yaml:"command"`
	Environment composeEnv         `yaml:"environment"`
	Ports       []string           `yaml:"ports"`
	Volumes     []composeVolume    `yaml:"volumes"`
	Configs     []composeConfigRef `yaml:"configs"`
	DependsOn   map[string]struct {
		Condition string `yaml:"condition"`
	} `yaml:"depends_on"`
	Healthcheck struct {
		Test []string `yaml:"test"`
	} `yaml:"healthcheck"`
}

// composeConfigRef gives a service a config of the file, at target.
type composeConfigRef struct {
	Source string `yaml:"source"`
	Target string `yaml:"target"`
}

// composeEnv is a service's environment, written as a mapping or as a list
// of NAME=value.
type composeEnv map[string]string

func (e *composeEnv) UnmarshalYAML(n *yaml.Node) error {
	*e = composeEnv{}
	switch n.Kind {
	case yaml.MappingNode:
		for i := 0; i+1 < len(n.Content); i += 2 {
			(*e)[n.Content[i].Value] = n.Content[i+1].Value
		}
	case yaml.SequenceNode:
		for _, item := range n.Content {
			name, value, _ := strings.Cut(item.Value, "=")
			(*e)[name] = value
		}
	default:
		return fmt.Errorf("line %d: environment is neither a mapping nor a list", n.Line)
	}
	return nil
}

// composeCommand is a service's command as written: a string, or a list
// whose items are joined by newlines.
type composeCommand string

func (c *composeCommand) UnmarshalYAML(n *yaml.Node) error {
	switch n.Kind {
	case yaml.ScalarNode:
		*c = composeCommand(n.Value)
	case yaml.SequenceNode:
		var items []string
		if err := n.Decode(&items); err != nil {
			return err
		}
		*c = composeCommand(strings.Join(items, "\n"))
	default:
		return fmt.Errorf("line %d: command is neither a string nor a list", n.Line)
	}
	return nil
}

// composeVolume is a mount, from the short syntax (source:target[:mode])
// or the long one.
type composeVolume struct {
	Source string `yaml:"source"`
	Target string `yaml:"target"`
}

func (v *composeVolume) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind == yaml.MappingNode {
		type long composeVolume
		return n.Decode((*long)(v))
	}
	parts := strings.Split(n.Value, ":")
	if len(parts) == 1 {
		v.Target = parts[0]
		return nil
	}
	v.Source, v.Target = parts[0], parts[1]
	return nil
}

func readCompose(t *testing.T, name string) composeFile {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join("../..", name))
	require.NoError(t, err)
	var f composeFile
	require.NoError(t, yaml.Unmarshal(raw, &f), name)
	return f
}

// mergeCompose applies override to base as `docker compose -f base -f
// override` does for what these tests read: environment variables are
// added or replaced by name, volumes by target.
func mergeCompose(base, override composeFile) composeFile {
	out := composeFile{Services: map[string]composeService{}}
	for name, s := range base.Services {
		out.Services[name] = s
	}
	for name, o := range override.Services {
		s := out.Services[name]
		env := composeEnv{}
		for k, v := range s.Environment {
			env[k] = v
		}
		for k, v := range o.Environment {
			env[k] = v
		}
		s.Environment = env
		vols := slices.DeleteFunc(slices.Clone(s.Volumes), func(v composeVolume) bool {
			return slices.ContainsFunc(o.Volumes, func(ov composeVolume) bool { return ov.Target == v.Target })
		})
		s.Volumes = append(vols, o.Volumes...)
		out.Services[name] = s
	}
	return out
}

// splitImage splits an image reference into its repository and tag.
func splitImage(image string) (repo, tag string) {
	if i := strings.LastIndex(image, ":"); i > strings.LastIndex(image, "/") {
		return image[:i], image[i+1:]
	}
	return image, ""
}

// servicesOf returns the names of f's services that run repo's image.
func servicesOf(f composeFile, repo string) []string {
	var names []string
	for name, s := range f.Services {
		if r, _ := splitImage(s.Image); r == repo {
			names = append(names, name)
		}
	}
	slices.Sort(names)
	return names
}

// theServiceOf returns the one service of f that runs repo's image.
func theServiceOf(t *testing.T, f composeFile, repo string) (string, composeService) {
	t.Helper()
	names := servicesOf(f, repo)
	require.Len(t, names, 1, "one service runs %s", repo)
	return names[0], f.Services[names[0]]
}

// serverModuleVersion is the version of go.temporal.io/server in go.mod,
// without its v: the server oncerun's tests run.
func serverModuleVersion(t *testing.T) string {
	t.Helper()
	fh, err := os.Open("../../go.mod")
	require.NoError(t, err)
	defer fh.Close()
	sc := bufio.NewScanner(fh)
	for sc.Scan() {
		if f := strings.Fields(sc.Text()); len(f) >= 2 && f[0] == "go.temporal.io/server" {
			return strings.TrimPrefix(f[1], "v")
		}
	}
	require.NoError(t, sc.Err())
	t.Fatal("go.mod does not require go.temporal.io/server")
	return ""
}

// TestComposePostgresMatchesDefaultURL checks that `docker compose up -d
// postgres` gives a server that the CLI's default DATABASE_URL reaches.
func TestComposePostgresMatchesDefaultURL(t *testing.T) {
	t.Parallel()
	f := readCompose(t, composeBase)
	pg, ok := f.Services["postgres"]
	require.True(t, ok, "docker-compose.yml has a postgres service")

	image, tag := splitImage(pg.Image)
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

// TestComposeTemporalImagesAreCurrentAndPinned checks that Temporal runs
// from its current images (the server, its admin tools, its UI; not the
// retired auto-setup image), each pinned to a release, the server and the
// schema tool at the release of the server module in go.mod.
func TestComposeTemporalImagesAreCurrentAndPinned(t *testing.T) {
	t.Parallel()
	want := serverModuleVersion(t)
	for _, file := range []string{composeBase, composeTLS} {
		for name, s := range readCompose(t, file).Services {
			if s.Image == "" {
				continue
			}
			repo, tag := splitImage(s.Image)
			assert.NotContains(t, repo, "auto-setup", "%s: %s is retired; use %s with a schema job", file, s.Image, imageServer)
			assert.NotEmpty(t, tag, "%s: service %s: image %s has no tag", file, name, s.Image)
			assert.NotEqual(t, "latest", tag, "%s: service %s: pin %s to a release", file, name, repo)
		}
	}

	f := readCompose(t, composeBase)
	release := regexp.MustCompile(`^\d+\.\d+\.\d+$`)
	for _, repo := range []string{imageServer, imageAdminTools, imageUI} {
		names := servicesOf(f, repo)
		require.NotEmpty(t, names, "a service runs %s", repo)
		for _, name := range names {
			_, tag := splitImage(f.Services[name].Image)
			assert.Regexp(t, release, tag, "service %s: %s pinned to a release", name, repo)
			if repo != imageUI {
				assert.Equal(t, want, tag, "service %s: %s at the release of go.temporal.io/server in go.mod", name, repo)
			}
		}
	}
}

// TestComposeSchemaIsSetUpBeforeTheServer checks the one-shot job that
// creates Temporal's databases and schemas: the server starts only after it
// succeeded, and it sets up both the default and the visibility store, on
// the PostgreSQL and under the names the server is configured with.
func TestComposeSchemaIsSetUpBeforeTheServer(t *testing.T) {
	t.Parallel()
	f := readCompose(t, composeBase)
	serverName, server := theServiceOf(t, f, imageServer)

	var jobName string
	for dep, d := range server.DependsOn {
		if d.Condition == "service_completed_successfully" && strings.Contains(string(f.Services[dep].Command), "temporal-sql-tool") {
			jobName = dep
		}
	}
	require.NotEmpty(t, jobName, "%s waits for a schema job to complete successfully", serverName)
	job := f.Services[jobName]
	repo, _ := splitImage(job.Image)
	assert.Equal(t, imageAdminTools, repo, "the schema tool comes with %s", imageAdminTools)

	// The server's stores, as its built-in configuration template reads them.
	plugin := server.Environment["DB"]
	require.True(t, strings.HasPrefix(plugin, "postgres"), "the server keeps its state in PostgreSQL (DB=%q)", plugin)
	pgHost := server.Environment["POSTGRES_SEEDS"]
	require.Contains(t, f.Services, pgHost, "POSTGRES_SEEDS names a service")
	pgImage, _ := splitImage(f.Services[pgHost].Image)
	assert.Equal(t, "postgres", pgImage)
	assert.Equal(t, "service_healthy", job.DependsOn[pgHost].Condition, "the schema job waits for PostgreSQL")
	stores := []struct{ db, schema string }{
		{cmp.Or(server.Environment["DBNAME"], "temporal"), "postgresql/v12/temporal"},
		{cmp.Or(server.Environment["VISIBILITY_DBNAME"], "temporal_visibility"), "postgresql/v12/visibility"},
	}

	steps := sqlToolSteps(t, string(job.Command), job.Environment)
	require.NotEmpty(t, steps)
	for _, s := range steps {
		assert.Equal(t, plugin, s.flags["plugin"], "%s: the server's plugin", s.line)
		assert.Equal(t, pgHost, s.flags["endpoint"], "%s: the server's PostgreSQL", s.line)
		assert.Equal(t, cmp.Or(server.Environment["DB_PORT"], "5432"), cmp.Or(s.flags["port"], "5432"), "%s: the server's port", s.line)
		assert.Equal(t, server.Environment["POSTGRES_USER"], s.flags["user"], "%s: the server's user", s.line)
	}
	for _, store := range stores {
		at := func(want func(sqlToolStep) bool) int {
			return slices.IndexFunc(steps, func(s sqlToolStep) bool { return s.flags["database"] == store.db && want(s) })
		}
		created := at(func(s sqlToolStep) bool { return s.command == "create-database" })
		setUp := at(func(s sqlToolStep) bool { return s.command == "setup-schema" })
		updated := at(func(s sqlToolStep) bool {
			return s.command == "update-schema" &&
				(s.flags["schema-name"] == store.schema || strings.HasSuffix(s.flags["schema-dir"], store.schema+"/versioned"))
		})
		assert.GreaterOrEqual(t, created, 0, "the job creates database %s", store.db)
		assert.Greater(t, setUp, created, "the job sets up versioning in %s after creating it", store.db)
		assert.Greater(t, updated, setUp, "the job brings %s to the release's %s schema after setting it up", store.db, store.schema)
	}
	shell := strings.Split(string(job.Command), "\n")
	require.GreaterOrEqual(t, len(shell), 2)
	assert.Equal(t, "sh", path.Base(shell[0]))
	assert.True(t, strings.HasPrefix(shell[1], "-") && strings.Contains(shell[1], "e"),
		"the job's shell stops at the first failed step (sh -e), so a failure stops the server from starting")
}

// sqlToolStep is one temporal-sql-tool call of a script.
type sqlToolStep struct {
	line, command string
	// flags by long name, with the tool's environment variables as defaults
	flags map[string]string
}

// sqlToolSteps parses the temporal-sql-tool calls of script, one a line.
func sqlToolSteps(t *testing.T, script string, env composeEnv) []sqlToolStep {
	t.Helper()
	long := map[string]string{
		"ep": "endpoint", "p": "port", "u": "user", "pw": "password", "db": "database", "pl": "plugin",
		"v": "version", "s": "schema-name", "d": "schema-dir",
	}
	commands := map[string]string{
		"create": "create-database", "create-database": "create-database",
		"setup": "setup-schema", "setup-schema": "setup-schema",
		"update": "update-schema", "update-schema": "update-schema",
	}
	var steps []sqlToolStep
	for line := range strings.SplitSeq(script, "\n") {
		words := strings.Fields(line)
		i := slices.Index(words, "temporal-sql-tool")
		if i < 0 {
			continue
		}
		s := sqlToolStep{line: strings.TrimSpace(line), flags: map[string]string{
			"endpoint": env["SQL_HOST"], "port": env["SQL_PORT"], "user": env["SQL_USER"],
			"database": cmp.Or(env["SQL_DATABASE"], "temporal"), "plugin": env["SQL_PLUGIN"],
		}}
		args := words[i+1:]
		for j := 0; j < len(args); j++ {
			a := args[j]
			if !strings.HasPrefix(a, "-") {
				if c, ok := commands[a]; ok && s.command == "" {
					s.command = c
				}
				continue
			}
			name, value, hasValue := strings.Cut(strings.TrimLeft(a, "-"), "=")
			name = cmp.Or(long[name], name)
			if !hasValue && j+1 < len(args) && !strings.HasPrefix(args[j+1], "-") && commands[args[j+1]] == "" {
				value, j = args[j+1], j+1
			}
			s.flags[name] = value
		}
		require.NotEmpty(t, s.command, "%q: a temporal-sql-tool command", s.line)
		steps = append(steps, s)
	}
	return steps
}

// TestComposeNamespaceExistsBeforeTheWorker checks that the namespace the
// worker polls is registered, on the worker's Temporal, before it starts.
func TestComposeNamespaceExistsBeforeTheWorker(t *testing.T) {
	t.Parallel()
	f := readCompose(t, composeBase)
	serverName, _ := theServiceOf(t, f, imageServer)
	w := f.Services["worker"]
	wantNS := cmp.Or(w.Environment[settings.EnvTemporalNamespace], worker.DefaultNamespace)

	create := regexp.MustCompile(`temporal\s+operator\s+namespace\s+create\b.*?(?:--namespace|-n)[ =]("?)(\S+?)("?)(\s|$)`)
	var jobName string
	for dep, d := range w.DependsOn {
		if d.Condition == "service_completed_successfully" && create.MatchString(string(f.Services[dep].Command)) {
			jobName = dep
		}
	}
	require.NotEmpty(t, jobName, "the worker waits for a job that registers its namespace to complete successfully")
	job := f.Services[jobName]
	assert.Equal(t, "service_healthy", job.DependsOn[serverName].Condition, "the namespace job waits for the server")
	assert.Equal(t, w.Environment[settings.EnvTemporalAddress], job.Environment["TEMPORAL_ADDRESS"], "the namespace job talks to the worker's Temporal")

	ns := create.FindStringSubmatch(unescapeCompose(string(job.Command)))[2]
	if v, ok := strings.CutPrefix(ns, "$"); ok {
		ns = job.Environment[strings.Trim(v, "{}")]
	}
	assert.Equal(t, wantNS, ns, "the namespace job registers the worker's namespace")
}

// unescapeCompose undoes compose's escaping of $ as $$ in what it passes on.
func unescapeCompose(s string) string { return strings.ReplaceAll(s, "$$", "$") }

// TestComposeShellVariablesAreEscaped checks that no command or healthcheck
// holds a $ that compose would replace (from the host's environment, or
// with nothing) before the container's shell sees it.
func TestComposeShellVariablesAreEscaped(t *testing.T) {
	t.Parallel()
	for _, file := range []string{composeBase, composeTLS} {
		for name, s := range readCompose(t, file).Services {
			for _, text := range append([]string{string(s.Command)}, s.Healthcheck.Test...) {
				assert.NotContains(t, strings.ReplaceAll(text, "$$", ""), "$", "%s: service %s: write $ as $$", file, name)
			}
		}
	}
}

// TestComposeWorkerMatchesWhatTheWorkerReads checks the worker service
// against the binary: it is built from ./cmd/oncerun, every variable it
// sets is one the worker reads, and the addresses point at the services of
// the file.
func TestComposeWorkerMatchesWhatTheWorkerReads(t *testing.T) {
	t.Parallel()
	f := readCompose(t, composeBase)
	for _, name := range []string{"postgres", "temporal", "temporal-ui", "worker"} {
		require.Contains(t, f.Services, name)
	}
	w := f.Services["worker"]
	assertWorkerReads(t, composeBase, w.Environment)

	assert.Equal(t, "Dockerfile", w.Build.Dockerfile)
	dockerfile, err := os.ReadFile(filepath.Join("../..", w.Build.Context, w.Build.Dockerfile))
	require.NoError(t, err)
	assert.Contains(t, string(dockerfile), "CGO_ENABLED=0 go build -trimpath -o /out/oncerun ./cmd/oncerun")
	assert.Contains(t, string(dockerfile), "COPY --from=build /out/oncerun /usr/local/bin/")
	assert.Contains(t, string(dockerfile), `ENTRYPOINT ["/usr/local/bin/oncerun", "worker"]`)
	mainGo, err := os.ReadFile("../../cmd/oncerun/main.go")
	require.NoError(t, err, "the Dockerfile builds ./cmd/oncerun")
	assert.Contains(t, string(mainGo), "package main")

	// TEMPORAL_ADDRESS names the temporal service on the port it publishes.
	tHost, tPort, err := net.SplitHostPort(w.Environment[settings.EnvTemporalAddress])
	require.NoError(t, err)
	require.Contains(t, f.Services, tHost)
	tRepo, _ := splitImage(f.Services[tHost].Image)
	assert.Equal(t, imageServer, tRepo, "TEMPORAL_ADDRESS names the Temporal server")
	assert.True(t, publishes(f.Services[tHost], tPort), "temporal publishes %s", tPort)
	assert.Equal(t, w.Environment[settings.EnvTemporalAddress], f.Services["temporal-ui"].Environment["TEMPORAL_ADDRESS"])

	// DATABASE_URL names the postgres service with its user and database.
	u, err := url.Parse(w.Environment[settings.EnvDatabaseURL])
	require.NoError(t, err)
	require.Contains(t, f.Services, u.Hostname())
	pg := f.Services[u.Hostname()]
	pgRepo, _ := splitImage(pg.Image)
	assert.Equal(t, "postgres", pgRepo, "DATABASE_URL names the PostgreSQL service")
	assert.Equal(t, "5432", u.Port())
	assert.Equal(t, pg.Environment["POSTGRES_USER"], u.User.Username())
	assert.Equal(t, pg.Environment["POSTGRES_DB"], strings.TrimPrefix(u.Path, "/"))

	// /healthz and /metrics are served where the port is published and the
	// healthcheck looks.
	_, mPort, err := net.SplitHostPort(w.Environment[settings.EnvMetricsAddr])
	require.NoError(t, err)
	assert.True(t, publishes(w, mPort))
	assert.Contains(t, strings.Join(w.Healthcheck.Test, " "), ":"+mPort+"/healthz")

	for _, dep := range []string{"postgres", "temporal"} {
		assert.Equal(t, "service_healthy", w.DependsOn[dep].Condition, "the worker waits for %s", dep)
		assert.NotEmpty(t, f.Services[dep].Healthcheck.Test, "%s has a healthcheck", dep)
	}
	if th, err := strconv.Atoi(w.Environment[settings.EnvCreditThreshold]); assert.NoError(t, err) {
		assert.EqualValues(t, shop.DefaultCreditApprovalThreshold, th)
	}

	// The file says how to have the worker serve the approvals service.
	raw, err := os.ReadFile("../../" + composeBase)
	require.NoError(t, err)
	for _, name := range []string{settings.EnvApprovalsTokensFile, settings.EnvApprovalsAddr} {
		assert.Contains(t, string(raw), "# "+name+": ", "the commented recipe sets %s", name)
		assert.Contains(t, settings.EnvNames, name)
	}

	// The server starts: its dynamic config file is there.
	_, server := theServiceOf(t, f, imageServer)
	i := slices.IndexFunc(server.Configs, func(c composeConfigRef) bool {
		return c.Target == cmp.Or(server.Environment["DYNAMIC_CONFIG_FILE_PATH"], "/etc/temporal/config/dynamicconfig/docker.yaml")
	})
	if assert.GreaterOrEqual(t, i, 0, "the server's dynamic config file is given to it") {
		assert.Contains(t, f.Configs, server.Configs[i].Source)
	}
}

// assertWorkerReads checks that the worker reads every variable of env.
func assertWorkerReads(t *testing.T, file string, env composeEnv) {
	t.Helper()
	for name := range env {
		if !strings.HasPrefix(name, grpcMetaPrefix) {
			assert.Contains(t, settings.EnvNames, name, "%s: the worker does not read %s", file, name)
		}
	}
}

// TestComposeTLSOverrideMountsWhatItNames checks docker-compose.tls.yml:
// the frontend requires client certificates, the worker connects with one,
// and every certificate or key a service is pointed at is mounted into that
// service's container.
func TestComposeTLSOverrideMountsWhatItNames(t *testing.T) {
	t.Parallel()
	base, override := readCompose(t, composeBase), readCompose(t, composeTLS)
	for name := range override.Services {
		assert.Contains(t, base.Services, name, "%s overrides a service of %s", composeTLS, composeBase)
	}
	f := mergeCompose(base, override)
	raw, err := os.ReadFile("../../" + composeTLS)
	require.NoError(t, err)

	// mounted returns the host file mounted at p in service name's
	// container by the override.
	mounted := func(name, p string) (string, bool) {
		for _, v := range override.Services[name].Volumes {
			if v.Source != "" && (p == v.Target || strings.HasPrefix(p, strings.TrimSuffix(v.Target, "/")+"/")) {
				return path.Join(v.Source, strings.TrimPrefix(p, v.Target)), true
			}
		}
		return "", false
	}
	sources := map[string]string{} // "service VAR" -> host file
	for name, s := range override.Services {
		for k, v := range s.Environment {
			if !strings.Contains(k, "TLS") || !path.IsAbs(v) {
				continue
			}
			src, ok := mounted(name, v)
			if assert.True(t, ok, "service %s: %s=%s is mounted into the container", name, k, v) {
				assert.False(t, path.IsAbs(src), "service %s: %s comes from the repository's directory, not %s", name, k, src)
				sources[name+" "+k] = src
			}
		}
		for _, v := range s.Volumes {
			assert.NotEqual(t, "ca.key", path.Base(v.Source), "service %s: the CA's key stays on the host", name)
		}
		// Every name a TLS client checks is one the server certificate of
		// the recipe holds.
		for k, v := range s.Environment {
			if strings.HasSuffix(k, "SERVER_NAME") {
				assert.Contains(t, string(raw), "DNS:"+v, "service %s: %s=%s is in the server certificate's names", name, k, v)
			}
		}
	}

	serverName, _ := theServiceOf(t, f, imageServer)
	server := f.Services[serverName]
	assert.Equal(t, "true", server.Environment["TEMPORAL_TLS_REQUIRE_CLIENT_AUTH"], "the frontend requires a client certificate")
	for _, k := range []string{"TEMPORAL_TLS_FRONTEND_CERT", "TEMPORAL_TLS_FRONTEND_KEY", "TEMPORAL_TLS_CLIENT1_CA_CERT"} {
		assert.NotEmpty(t, server.Environment[k], "the frontend's %s", k)
	}

	w := f.Services["worker"]
	assertWorkerReads(t, composeTLS, w.Environment)
	for _, k := range []string{"TEMPORAL_TLS_CLIENT_CERT_PATH", "TEMPORAL_TLS_CLIENT_KEY_PATH", "TEMPORAL_TLS_SERVER_CA_CERT_PATH"} {
		assert.Contains(t, sources, "worker "+k, "the worker's %s is a file mounted into it", k)
	}
	assert.NotEmpty(t, w.Environment["TEMPORAL_TLS_SERVER_NAME"])
	assert.Equal(t, sources[serverName+" TEMPORAL_TLS_CLIENT1_CA_CERT"], sources["worker TEMPORAL_TLS_SERVER_CA_CERT_PATH"],
		"one CA: the worker checks the server with the CA the server checks the worker with")
	assert.NotEqual(t, sources[serverName+" TEMPORAL_TLS_FRONTEND_KEY"], sources["worker TEMPORAL_TLS_CLIENT_KEY_PATH"],
		"the worker has a key of its own, not the server's")
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

// TestComposeTracingRecipeNamesItsReceiver: the commented recipe of the
// worker points OTEL_EXPORTER_OTLP_ENDPOINT at the tracing profile's Jaeger
// service, on the OTLP/HTTP port it listens on, a variable the worker reads.
func TestComposeTracingRecipeNamesItsReceiver(t *testing.T) {
	t.Parallel()
	f := readCompose(t, composeBase)
	raw, err := os.ReadFile("../../" + composeBase)
	require.NoError(t, err)
	m := regexp.MustCompile(`(?m)^\s*# ` + settings.EnvOTelEndpoint + `: http://([a-z-]+):(\d+)$`).FindStringSubmatch(string(raw))
	require.NotNil(t, m, "the worker's environment has a commented %s", settings.EnvOTelEndpoint)
	assert.Contains(t, settings.EnvNames, settings.EnvOTelEndpoint)
	jaeger, ok := f.Services[m[1]]
	require.True(t, ok, "the recipe names service %s", m[1])
	repo, tag := splitImage(jaeger.Image)
	assert.Equal(t, "jaegertracing/jaeger", repo)
	assert.Regexp(t, `^2\.\d+\.\d+$`, tag, "Jaeger v2, pinned")
	assert.Equal(t, "4318", m[2], "Jaeger's OTLP/HTTP receiver")
	assert.True(t, publishes(jaeger, "4318"), "a worker on the host can send to it")
	assert.True(t, publishes(jaeger, "16686"), "the UI is published")
	assert.Contains(t, string(raw), "profiles: [\"tracing\"]", "Jaeger starts only with the tracing profile")
}
