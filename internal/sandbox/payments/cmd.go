package payments

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"

	"github.com/spf13/cobra"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
)

// Command returns the sandbox-payments command, which serves a Server until
// its context is done:
//
//	sandbox-payments --addr 127.0.0.1:8099 --data-dir DIR [--key-retention 24h] [--payments FILE] [--api-key KEY]
//
// Once listening it prints "sandbox-payments listening on http://ADDR" to
// its output; request logs go to its error output as JSON lines.
func Command() *cobra.Command {
	var (
		cfg          Config
		paymentsFile string
	)
	cmd := &cobra.Command{
		Use:   "sandbox-payments --data-dir DIR [--addr ADDR] [--key-retention 24h] [--payments FILE] [--api-key KEY]",
		Short: "Serve a sandbox payment provider with a refunds API like Stripe's",
		Long: `Serve a sandbox payment provider: POST /v1/refunds with an Idempotency-Key
header, GET /v1/refunds to list them, and /v1/sandbox/payments and
/v1/sandbox/faults to seed payments and inject failures (dropped connections,
500s before or after applying, delays, unavailable reads). Its ledger lives
in --data-dir and survives restarts. Requests need
"Authorization: Bearer <api key>".

--payments names a JSON file holding an array of {"id","amount","currency"}
payments to store at start.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if cfg.KeyRetention <= 0 {
				return fmt.Errorf("--key-retention must be positive, got %s", cfg.KeyRetention)
			}
			if paymentsFile != "" {
				ps, err := readPaymentsFile(paymentsFile)
				if err != nil {
					return err
				}
				cfg.Payments = ps
			}
			cfg.Log = newLogger(cmd.ErrOrStderr())
			defer func() { _ = cfg.Log.Sync() }()
			r, err := Start(cmd.Context(), cfg)
			if err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "sandbox-payments listening on %s\n", r.URL())
			<-r.Done()
			return r.Close()
		},
	}
	f := cmd.Flags()
	f.StringVar(&cfg.Addr, "addr", DefaultAddr, "address to listen on; port 0 picks a free one")
	f.StringVar(&cfg.DataDir, "data-dir", "", "directory of the ledger file (created if missing)")
	f.DurationVar(&cfg.KeyRetention, "key-retention", DefaultKeyRetention, "how long an idempotency key binds its first refund")
	f.StringVar(&paymentsFile, "payments", "", "JSON file with an array of payments to store at start")
	f.StringVar(&cfg.APIKey, "api-key", DefaultAPIKey, "bearer token requests must carry")
	_ = cmd.MarkFlagRequired("data-dir")
	return cmd
}

// readPaymentsFile reads a JSON array of payments.
func readPaymentsFile(path string) ([]Payment, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read payments file: %w", err)
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	var ps []Payment
	if err := dec.Decode(&ps); err != nil {
		return nil, fmt.Errorf("payments file %s: want a JSON array of {\"id\",\"amount\",\"currency\"}: %w", path, err)
	}
	return ps, nil
}

// newLogger logs JSON lines at info level to w.
func newLogger(w io.Writer) *zap.Logger {
	enc := zapcore.NewJSONEncoder(zap.NewProductionEncoderConfig())
	return zap.New(zapcore.NewCore(enc, zapcore.AddSync(w), zap.InfoLevel))
}
