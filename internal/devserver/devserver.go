// Package devserver embeds a Temporal server for a laptop: Temporal's own
// server code with its SQLite persistence in one file, so runs survive a
// restart of the process. It is what `oncerun-dev dev` starts when
// TEMPORAL_ADDRESS is not set; production uses a real Temporal cluster.
// StartNode starts a node of such a cluster instead, its state in
// PostgreSQL: the chaos harness runs two and kills them in turn.
package devserver

import (
	"cmp"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"time"

	"go.temporal.io/server/common/authorization"
	"go.temporal.io/server/common/cluster"
	"go.temporal.io/server/common/config"
	"go.temporal.io/server/common/dynamicconfig"
	"go.temporal.io/server/common/log"
	"go.temporal.io/server/common/metrics"
	sqliteplugin "go.temporal.io/server/common/persistence/sql/sqlplugin/sqlite"
	"go.temporal.io/server/schema/sqlite"
	"go.temporal.io/server/temporal"
	"go.uber.org/zap"
)

// Defaults of [Config].
const (
	DefaultDataDir   = ".oncerun"
	DefaultIP        = "127.0.0.1"
	DefaultPort      = 7233
	DefaultNamespace = "default"
	clusterName      = "oncerun-dev"
	dbFile           = "temporal.sqlite"
	logFile          = "temporal.log"
)

// ErrPortInUse means the frontend port is taken, most likely by another
// Temporal server.
var ErrPortInUse = errors.New("port in use")

// Config configures an embedded server.
type Config struct {
	// DataDir holds the SQLite file. Default DefaultDataDir; created if
	// missing.
	DataDir string
	// IP is the address the services listen on. Default DefaultIP.
	IP string
	// Port is the frontend's gRPC port. Default DefaultPort. The other
	// services use ports at fixed offsets from it (Port+1, Port+2, Port+6,
	// and Port-300, -299, -298, -294 for membership), as Temporal's own
	// defaults do.
	Port int
	// Namespace is registered at start. Default DefaultNamespace.
	Namespace string
	// Logger receives the server's own log lines. Default: warnings and
	// errors to temporal.log in DataDir.
	Logger *zap.Logger
	// FrontendTLS, when set, makes the frontend speak TLS only, with this
	// certificate, and with RequireClientAuth, take only clients whose
	// certificate one of ClientCAFiles signed (mutual TLS).
	FrontendTLS *config.ServerTLS
	// ClaimMapper and Authorizer, when set, decide who may call the
	// frontend, as in a secured cluster (an API key's check, say).
	ClaimMapper authorization.ClaimMapper
	Authorizer  authorization.Authorizer
}

// prepare sets c's defaults, checks its frontend port, creates its data
// directory and, without a logger, its log file there: what every kind of
// server needs before it starts.
func (c *Config) prepare() error {
	c.DataDir = cmp.Or(c.DataDir, DefaultDataDir)
	c.IP = cmp.Or(c.IP, DefaultIP)
	c.Port = cmp.Or(c.Port, DefaultPort)
	c.Namespace = cmp.Or(c.Namespace, DefaultNamespace)
	if c.Port <= 300 || c.Port > 65535-6 {
		return fmt.Errorf("frontend port %d: want 301 to 65529, so that the other services' ports fit", c.Port)
	}
	if err := checkFree(c.IP, c.Port); err != nil {
		return fmt.Errorf("temporal frontend: %w", err)
	}
	if err := os.MkdirAll(c.DataDir, 0o755); err != nil {
		return fmt.Errorf("data dir: %w", err)
	}
	if c.Logger == nil {
		zc := zap.NewProductionConfig()
		zc.Level = zap.NewAtomicLevelAt(zap.WarnLevel)
		zc.OutputPaths = []string{filepath.Join(c.DataDir, logFile)}
		zc.ErrorOutputPaths = zc.OutputPaths
		logger, err := zc.Build()
		if err != nil {
			return fmt.Errorf("server log: %w", err)
		}
		c.Logger = logger
	}
	return nil
}

// secured reports whether the frontend checks its callers: the server's
// own services then reach it through an internal frontend, which does not.
func (c Config) secured() bool {
	return c.FrontendTLS != nil || c.ClaimMapper != nil || c.Authorizer != nil
}

// Server is a running embedded Temporal server.
type Server struct {
	srv       temporal.Server
	addr      string
	namespace string
	dbPath    string
}

// Start creates the data directory and the schema if they are missing,
// registers the namespace and starts every Temporal service in this process.
// A frontend port that is taken is an error wrapping [ErrPortInUse].
func Start(cfg Config) (*Server, error) {
	if err := cfg.prepare(); err != nil {
		return nil, err
	}
	dbPath, err := filepath.Abs(filepath.Join(cfg.DataDir, dbFile))
	if err != nil {
		return nil, fmt.Errorf("data dir: %w", err)
	}

	sqlCfg := &config.SQL{
		PluginName:   sqliteplugin.PluginName,
		DatabaseName: dbPath,
		// Keys the plugin does not know become pragmas, named as written:
		// "journal_mode", not "_journal_mode", which SQLite ignores.
		ConnectAttributes: map[string]string{"mode": "rwc", "journal_mode": "wal", "synchronous": "2"},
	}
	if _, err := os.Stat(dbPath); errors.Is(err, os.ErrNotExist) {
		if err := sqlite.SetupSchema(sqlCfg); err != nil {
			return nil, fmt.Errorf("create Temporal schema in %s: %w", dbPath, err)
		}
	}
	ns, err := sqlite.NewNamespaceConfig(clusterName, cfg.Namespace, false, nil)
	if err != nil {
		return nil, fmt.Errorf("namespace %s: %w", cfg.Namespace, err)
	}
	if err := sqlite.CreateNamespaces(sqlCfg, ns); err != nil {
		return nil, fmt.Errorf("register namespace %s: %w", cfg.Namespace, err)
	}

	sc, err := serverConfig(cfg, sqlCfg)
	if err != nil {
		return nil, err
	}
	logger := log.NewZapLogger(cfg.Logger)
	authorizer, err := authorization.GetAuthorizerFromConfig(&sc.Global.Authorization)
	if err != nil {
		return nil, fmt.Errorf("authorizer: %w", err)
	}
	claims, err := authorization.GetClaimMapperFromConfig(&sc.Global.Authorization, logger)
	if err != nil {
		return nil, fmt.Errorf("claim mapper: %w", err)
	}
	services := temporal.DefaultServices
	if cfg.secured() {
		services = append(slices.Clone(services), internalFrontend)
	}
	if cfg.Authorizer != nil {
		authorizer = cfg.Authorizer
	}
	if cfg.ClaimMapper != nil {
		claims = cfg.ClaimMapper
	}
	srv, err := temporal.NewServer(
		temporal.WithConfig(sc),
		temporal.ForServices(services),
		temporal.WithLogger(logger),
		temporal.WithAuthorizer(authorizer),
		temporal.WithClaimMapper(func(*config.Config) authorization.ClaimMapper { return claims }),
		temporal.WithDynamicConfigClient(dynamicconfig.StaticClient{}),
	)
	if err != nil {
		return nil, fmt.Errorf("create Temporal server: %w", err)
	}
	if err := srv.Start(); err != nil {
		return nil, fmt.Errorf("start Temporal server: %w", err)
	}
	return &Server{srv: srv, addr: net.JoinHostPort(cfg.IP, strconv.Itoa(cfg.Port)), namespace: cfg.Namespace, dbPath: dbPath}, nil
}

// Address is the frontend's host:port, for TEMPORAL_ADDRESS.
func (s *Server) Address() string { return s.addr }

// Namespace is the registered namespace.
func (s *Server) Namespace() string { return s.namespace }

// DBPath is the SQLite file that holds the server's state.
func (s *Server) DBPath() string { return s.dbPath }

// Stop stops every service.
func (s *Server) Stop() error { return s.srv.Stop() }

// servicePorts are the gRPC and membership ports of each service, derived
// from the frontend's as in Temporal's own defaults (7233, 7234, 7235, 7239
// and 6933, 6934, 6935, 6939). They must not change between restarts on the
// same data: the cluster's membership is kept in the database, and a server
// that came back on other ports would route to its own stale entries.
var servicePorts = []struct {
	name             string
	grpc, membership int
}{
	{"frontend", 0, -300},
	{"history", 1, -299},
	{"matching", 2, -298},
	{"worker", 6, -294},
	// Only when Config.secured: the frontend of the server's own services.
	{internalFrontend, 3, -297},
}

// internalFrontend is the frontend the server's own services (its system
// workflows: schedules, batches) call when the public one checks callers.
const internalFrontend = "internal-frontend"

// portCycle hands out the ports of [lo, hi) in steps of step, wrapping
// around, so that two pickers of one process never get the same port while
// a free one is left. Each process starts at a place derived from its id,
// a multiple of spread steps, so that processes with neighbouring ids get
// spread ports each before their picks meet.
type portCycle struct {
	sync.Mutex
	lo, hi, step, spread, next int
}

// take returns the first port, from where the last call stopped, for which
// free holds, going once around the range.
func (c *portCycle) take(free func(port int) bool) (int, bool) {
	c.Lock()
	defer c.Unlock()
	slots := (c.hi - c.lo) / c.step
	if c.next == 0 {
		c.next = c.lo + c.step*c.spread*(os.Getpid()%(slots/c.spread))
	}
	for range slots {
		port := c.next
		if c.next += c.step; c.next >= c.hi {
			c.next = c.lo
		}
		if free(port) {
			return port, true
		}
	}
	return 0, false
}

// frontendPorts hands out FreePort's blocks of ten, between 20000 and 32000,
// each process's first four blocks before the next one's: a process may
// take two (the chaos harness runs two nodes) without meeting its
// neighbour's, and no block's membership ports (300 below, 30 blocks) are
// those of another process's first two blocks.
var frontendPorts = portCycle{lo: 20000, hi: 32000, step: 10, spread: 4}

// FreePort returns a frontend port on ip whose every service port (Ports)
// is free now. The ports are taken between 20000 and 32000, below the
// kernel's usual ephemeral range: a port picked there could be taken by any
// outgoing connection between the pick and the server's start.
func FreePort(ip string) (int, error) {
	port, ok := frontendPorts.take(func(port int) bool { return allFree(ip, Ports(port)) })
	if !ok {
		return 0, fmt.Errorf("no free block of Temporal ports on %s between 20000 and 32000", ip)
	}
	return port, nil
}

// sidePorts hands out FreeAddr's ports, between 10000 and 19600, 16 for
// each process before it meets the next one's.
var sidePorts = portCycle{lo: 10000, hi: 19600, step: 1, spread: 16}

// FreeAddr returns a free listen address on ip for a process that serves
// beside the server (a worker's metrics, the approvals service, a sandbox
// provider). Its port is taken between 10000 and 19600: below the kernel's
// usual ephemeral range, where any outgoing connection could take it
// between the pick and the listen, and below FreePort's ports. A process
// that is started again on the same address finds it free.
func FreeAddr(ip string) (string, error) {
	port, ok := sidePorts.take(func(port int) bool { return checkFree(ip, port) == nil })
	if !ok {
		return "", fmt.Errorf("no free port on %s between 10000 and 19600", ip)
	}
	return net.JoinHostPort(ip, strconv.Itoa(port)), nil
}

func allFree(ip string, ports []int) bool {
	for _, p := range ports {
		if checkFree(ip, p) != nil {
			return false
		}
	}
	return true
}

// Ports lists every port a server with the given frontend port listens on,
// apart from its metrics port, which is picked free at each start.
func Ports(frontend int) []int {
	ports := make([]int, 0, 2*len(servicePorts))
	for _, sp := range servicePorts {
		ports = append(ports, frontend+sp.grpc, frontend+sp.membership)
	}
	return ports
}

func serverConfig(cfg Config, sqlCfg *config.SQL) (*config.Config, error) {
	metricsPort, err := freePort(cfg.IP)
	if err != nil {
		return nil, err
	}
	services := make(map[string]config.Service, len(servicePorts))
	for _, sp := range servicePorts {
		if sp.name == internalFrontend && !cfg.secured() {
			continue
		}
		grpc, membership := cfg.Port+sp.grpc, cfg.Port+sp.membership
		for _, p := range []int{grpc, membership} {
			if sp.name == "frontend" && p == cfg.Port {
				continue // checked by the caller
			}
			if err := checkFree(cfg.IP, p); err != nil {
				return nil, fmt.Errorf("%s service: %w", sp.name, err)
			}
		}
		services[sp.name] = config.Service{RPC: config.RPC{GRPCPort: grpc, MembershipPort: membership, BindOnIP: cfg.IP}}
	}
	frontend := net.JoinHostPort(cfg.IP, strconv.Itoa(cfg.Port))
	var tlsCfg config.RootTLS
	if cfg.FrontendTLS != nil {
		tlsCfg.Frontend.Server = *cfg.FrontendTLS
	}
	public := config.PublicClient{HostPort: frontend}
	if cfg.secured() {
		public = config.PublicClient{} // the server's own clients use the internal frontend
	}
	return &config.Config{
		Global: config.Global{
			TLS:        tlsCfg,
			Membership: config.Membership{MaxJoinDuration: 30 * time.Second, BroadcastAddress: cfg.IP},
			Metrics: &metrics.Config{Prometheus: &metrics.PrometheusConfig{
				ListenAddress: net.JoinHostPort(cfg.IP, strconv.Itoa(metricsPort)), HandlerPath: "/metrics",
			}},
		},
		Persistence: config.Persistence{
			DefaultStore:     sqliteplugin.PluginName,
			VisibilityStore:  sqliteplugin.PluginName,
			NumHistoryShards: 1,
			DataStores:       map[string]config.DataStore{sqliteplugin.PluginName: {SQL: sqlCfg}},
		},
		ClusterMetadata: &cluster.Config{
			FailoverVersionIncrement: 10,
			MasterClusterName:        clusterName,
			CurrentClusterName:       clusterName,
			ClusterInformation: map[string]cluster.ClusterInformation{
				clusterName: {Enabled: true, InitialFailoverVersion: 1, RPCAddress: frontend},
			},
		},
		DCRedirectionPolicy: config.DCRedirectionPolicy{Policy: "noop"},
		Services:            services,
		Archival: config.Archival{
			History:    config.HistoryArchival{State: "disabled"},
			Visibility: config.VisibilityArchival{State: "disabled"},
		},
		NamespaceDefaults: config.NamespaceDefaults{Archival: config.ArchivalNamespaceDefaults{
			History:    config.HistoryArchivalNamespaceDefaults{State: "disabled"},
			Visibility: config.VisibilityArchivalNamespaceDefaults{State: "disabled"},
		}},
		PublicClient: public,
	}, nil
}

func checkFree(ip string, port int) error {
	ln, err := net.Listen("tcp", net.JoinHostPort(ip, strconv.Itoa(port)))
	if err != nil {
		return fmt.Errorf("port %s:%d: %w (is another Temporal server running? use it with TEMPORAL_ADDRESS, or pick another port): %v",
			ip, port, ErrPortInUse, err)
	}
	return ln.Close()
}

func freePort(ip string) (int, error) {
	ln, err := net.Listen("tcp", net.JoinHostPort(ip, "0"))
	if err != nil {
		return 0, fmt.Errorf("find a free port on %s: %w", ip, err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}
