package devserver

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"slices"
	"strconv"
	"time"

	"go.temporal.io/server/common/authorization"
	"go.temporal.io/server/common/config"
	"go.temporal.io/server/common/dynamicconfig"
	"go.temporal.io/server/common/log"
	"go.temporal.io/server/common/persistence/sql/sqlplugin/postgresql"
	"go.temporal.io/server/temporal"
)

// Defaults of [Cluster].
const (
	DefaultDatabasePrefix = "temporal"
	DefaultHistoryShards  = 4
)

// The data stores of a node, as its configuration names them.
const (
	defaultStore    = "default"
	visibilityStore = "visibility"
)

// Cluster makes a server a node of a Temporal cluster whose state is in
// PostgreSQL: any number of nodes given the same Cluster share one state
// and find each other through the cluster_membership table, each running
// every service on its own ports.
type Cluster struct {
	// PostgresURL names the PostgreSQL server, as
	// postgres://user:password@host:port/database?sslmode=disable. The
	// database of the URL (default postgres) is the one the node connects
	// to first, to create its own. Required.
	PostgresURL string
	// DatabasePrefix names the node's databases: DatabasePrefix_temporal
	// holds the default store, DatabasePrefix_visibility the visibility
	// store. Each is created if missing. Default DefaultDatabasePrefix.
	DatabasePrefix string
	// Address is where clients reach the cluster: the load balancer in
	// front of the nodes' frontends. It is recorded in the cluster's
	// metadata, so every node of a cluster must be given the same. Default:
	// this node's frontend.
	Address string
	// HistoryShards is how many history shards the cluster has, spread over
	// its nodes and moved between them as nodes come and go. It is fixed at
	// the cluster's first start. Default DefaultHistoryShards.
	HistoryShards int32
}

// Databases are the names of the cluster's default and visibility
// databases.
func (c Cluster) Databases() (main, visibility string) {
	prefix := cmp.Or(c.DatabasePrefix, DefaultDatabasePrefix)
	return prefix + "_temporal", prefix + "_visibility"
}

// StartNode starts a node of the Temporal cluster cl: it creates the
// cluster's databases if they are missing, sets up or updates their
// schema with Temporal's own schema tool, registers the namespace, and
// starts every Temporal service in this process on cfg's ports (and
// cfg's frontend TLS, claim mapper and authorizer, as Start does). Nodes that
// start at once take turns: each holds a PostgreSQL advisory lock while it
// prepares the databases and starts. A frontend port that is taken is an
// error wrapping [ErrPortInUse].
func StartNode(cfg Config, cl Cluster) (*Server, error) {
	if cl.PostgresURL == "" {
		return nil, errors.New("temporal cluster: no PostgreSQL URL")
	}
	cl.HistoryShards = cmp.Or(cl.HistoryShards, DefaultHistoryShards)
	if cl.HistoryShards < 1 {
		return nil, fmt.Errorf("temporal cluster: %d history shards: want at least 1", cl.HistoryShards)
	}
	if err := cfg.prepare(); err != nil {
		return nil, err
	}
	frontend := net.JoinHostPort(cfg.IP, strconv.Itoa(cfg.Port))
	cl.Address = cmp.Or(cl.Address, frontend)
	logger := log.NewZapLogger(cfg.Logger)
	mainDB, visibilityDB := cl.Databases()
	mainCfg, err := sqlConfig(cl.PostgresURL, mainDB)
	if err != nil {
		return nil, err
	}
	visibilityCfg, err := sqlConfig(cl.PostgresURL, visibilityDB)
	if err != nil {
		return nil, err
	}
	// Each of a node's four services has its own pool of each store. The
	// caps keep two nodes at about 25 connections when quiet and below 75
	// at worst, inside PostgreSQL's default of 100 that tests share.
	mainCfg.MaxConns, mainCfg.MaxIdleConns = 6, 2
	visibilityCfg.MaxConns, visibilityCfg.MaxIdleConns = 3, 1

	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	unlock, err := lockCluster(ctx, cl)
	if err != nil {
		return nil, err
	}
	// Held until the node has started: the first start of a cluster also
	// writes its metadata, which two nodes must not race to do.
	defer unlock()
	if err := prepare(ctx, cl, mainCfg, visibilityCfg, cfg.Namespace, logger); err != nil {
		return nil, err
	}

	sc, err := serverConfig(cfg, mainCfg)
	if err != nil {
		return nil, err
	}
	sc.Persistence = config.Persistence{
		DefaultStore:     defaultStore,
		VisibilityStore:  visibilityStore,
		NumHistoryShards: cl.HistoryShards,
		DataStores: map[string]config.DataStore{
			defaultStore:    {SQL: mainCfg},
			visibilityStore: {SQL: visibilityCfg},
		},
	}
	info := sc.ClusterMetadata.ClusterInformation[clusterName]
	info.RPCAddress = cl.Address
	sc.ClusterMetadata.ClusterInformation[clusterName] = info

	services := temporal.DefaultServices
	if cfg.secured() {
		services = append(slices.Clone(services), internalFrontend)
	}
	opts := []temporal.ServerOption{
		temporal.WithConfig(sc),
		temporal.ForServices(services),
		temporal.WithLogger(logger),
		temporal.WithDynamicConfigClient(dynamicconfig.StaticClient{}),
	}
	if cfg.Authorizer != nil {
		opts = append(opts, temporal.WithAuthorizer(cfg.Authorizer))
	}
	if cfg.ClaimMapper != nil {
		opts = append(opts, temporal.WithClaimMapper(func(*config.Config) authorization.ClaimMapper { return cfg.ClaimMapper }))
	}
	srv, err := temporal.NewServer(opts...)
	if err != nil {
		return nil, fmt.Errorf("create Temporal server: %w", err)
	}
	if err := srv.Start(); err != nil {
		return nil, fmt.Errorf("start Temporal server: %w", err)
	}
	return &Server{srv: srv, addr: frontend, namespace: cfg.Namespace}, nil
}

// sqlConfig is Temporal's configuration of the database named database on
// the PostgreSQL server of pgURL, through the pgx driver. The URL's query
// parameters (sslmode, say) become connection attributes.
func sqlConfig(pgURL, database string) (*config.SQL, error) {
	u, err := url.Parse(pgURL)
	if err != nil || (u.Scheme != "postgres" && u.Scheme != "postgresql") {
		return nil, errors.New("temporal cluster: PostgreSQL URL: want postgres://user:password@host:port/database")
	}
	host := cmp.Or(u.Hostname(), "127.0.0.1")
	port := cmp.Or(u.Port(), "5432")
	password, _ := u.User.Password()
	attrs := map[string]string{}
	for k, v := range u.Query() {
		if len(v) > 0 {
			attrs[k] = v[len(v)-1]
		}
	}
	return &config.SQL{
		PluginName:        postgresql.PluginNamePGX,
		DatabaseName:      database,
		ConnectAddr:       net.JoinHostPort(host, port),
		ConnectProtocol:   "tcp",
		User:              u.User.Username(),
		Password:          password,
		ConnectAttributes: attrs,
	}, nil
}
