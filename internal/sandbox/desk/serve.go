package desk

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"

	mcpsdk "github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/spf13/cobra"

	"github.com/oncerun/oncerun/internal/httpserver"
)

// DefaultAddr is where `oncerun-dev sandbox-desk` listens by default.
const DefaultAddr = "127.0.0.1:8097"

// Running is a desk served over Streamable HTTP.
type Running struct {
	*Desk
	url  string
	srv  *httpserver.Server
	done chan struct{}
}

// URL is the desk's MCP endpoint, http://ADDR/mcp.
func (r *Running) URL() string { return r.url }

// Close stops serving.
func (r *Running) Close() error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return r.srv.Shutdown(ctx)
}

// Done is closed once the desk stopped serving.
func (r *Running) Done() <-chan struct{} { return r.done }

// Serve opens the desk of cfg and serves its MCP server over Streamable
// HTTP at addr (port 0 picks a free one) until ctx ends.
func Serve(ctx context.Context, addr string, cfg Config) (*Running, error) {
	d, err := New(cfg)
	if err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("desk: listen: %w", err)
	}
	server := d.Server()
	mux := http.NewServeMux()
	mux.Handle("/mcp", mcpsdk.NewStreamableHTTPHandler(func(*http.Request) *mcpsdk.Server { return server }, nil))
	// The limits of every server of oncerun, but for the write deadline:
	// Streamable HTTP answers over event streams that stay open.
	r := &Running{Desk: d, url: "http://" + ln.Addr().String() + "/mcp", done: make(chan struct{}),
		srv: httpserver.New(mux, httpserver.Config{WriteTimeout: -1})}
	go func() {
		defer close(r.done)
		if err := r.srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			fmt.Println("desk:", err)
		}
	}()
	go func() {
		<-ctx.Done()
		_ = r.Close()
	}()
	return r, nil
}

// Command returns the sandbox-desk command:
//
//	sandbox-desk --data-dir DIR [--addr 127.0.0.1:8097 | --stdio] [--ignore-keys]
func Command() *cobra.Command {
	var (
		cfg   Config
		addr  string
		stdio bool
	)
	cmd := &cobra.Command{
		Use:   "sandbox-desk --data-dir DIR [--addr ADDR | --stdio] [--ignore-keys] [--ticket-priority]",
		Short: "Serve a sandbox support desk as an MCP server (tickets and vouchers)",
		Long: `Serve a sandbox support desk over the Model Context Protocol, for trying
oncerun's MCP tools: open_ticket and issue_voucher (each once per
idempotency key, read from the request's _meta "io.oncerun/idempotency-key"
or the Idempotency-Key header) and their paired reads find_ticket and
find_voucher. The ledger lives in --data-dir/ledger.json and survives
restarts.

By default it serves Streamable HTTP at http://ADDR/mcp; --stdio serves one
client on standard input and output, as an MCP client's child process.
--ignore-keys makes every call a new ticket or voucher, like a server that
knows nothing of idempotency keys. --ticket-priority gives open_ticket and
find_ticket an optional priority argument: the desk as a redeploy that
changed a tool's schema leaves it.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if stdio {
				d, err := New(cfg)
				if err != nil {
					return err
				}
				return d.Server().Run(cmd.Context(), &mcpsdk.StdioTransport{})
			}
			r, err := Serve(cmd.Context(), addr, cfg)
			if err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "sandbox-desk listening on %s\n", r.URL())
			<-r.Done()
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&cfg.DataDir, "data-dir", "", "directory of the ledger file (created if missing)")
	f.StringVar(&addr, "addr", DefaultAddr, "address to serve Streamable HTTP on; port 0 picks a free one")
	f.BoolVar(&stdio, "stdio", false, "serve one client on standard input and output instead")
	f.BoolVar(&cfg.IgnoreKeys, "ignore-keys", false, "ignore idempotency keys: every call makes a new ticket or voucher")
	f.BoolVar(&cfg.TicketPriority, "ticket-priority", false, "give open_ticket an optional priority argument, as a redeploy that changed its schema would")
	_ = cmd.MarkFlagRequired("data-dir")
	return cmd
}
