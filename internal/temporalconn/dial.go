package temporalconn

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"strings"
	"time"

	"go.temporal.io/api/serviceerror"
	"go.temporal.io/sdk/client"
	"go.uber.org/zap"
	"google.golang.org/grpc/codes"
)

// EnvConnectWait is how long a process keeps trying to reach a Temporal
// server that is not there yet (one restarting, a deploy that starts both
// at once) before it gives up. It is oncerun's own, not the temporal CLI's.
const EnvConnectWait = "TEMPORAL_CONNECT_WAIT"

// DefaultConnectWait is the default of EnvConnectWait.
const DefaultConnectWait = time.Minute

// ErrRefused wraps the error of a dial that Temporal answered with a
// refusal: a TLS handshake that failed, or an authentication or
// authorization failure. Waiting does not help; the configuration must
// change.
var ErrRefused = errors.New("refused by Temporal")

// Dial connects to Temporal with opts, trying again with backoff (0.5 s,
// doubling to 5 s) for up to wait (DefaultConnectWait when zero; a negative
// wait tries once) while the server is not reachable. Each failed try is
// logged. A refusal (see ErrRefused) is returned at once, saying what
// failed and which variables to check.
//
// An address with user-info is refused before anything is sent (see
// CheckAddress): no error or log line of a dial can show its password.
func Dial(ctx context.Context, opts client.Options, wait time.Duration, log *zap.Logger) (client.Client, error) {
	if err := CheckAddress(opts.HostPort, "the Temporal address"); err != nil {
		return nil, err
	}
	if wait == 0 {
		wait = DefaultConnectWait
	}
	started := time.Now()
	deadline := started.Add(wait)
	backoff := 500 * time.Millisecond
	for tries := 1; ; tries++ {
		c, err := client.DialContext(ctx, opts)
		if err == nil {
			if tries > 1 {
				log.Info("connected to Temporal", zap.String("temporal", opts.HostPort), zap.Int("tries", tries))
			}
			return c, nil
		}
		if refused := Refusal(opts, err); refused != nil {
			return nil, refused
		}
		if refused := probeTLS(ctx, opts); refused != nil {
			return nil, refused
		}
		if wait < 0 {
			return nil, fmt.Errorf("connect to Temporal at %s (%s%s): %w", opts.HostPort, EnvAddress, hint(opts, err), err)
		}
		if time.Now().Add(backoff).After(deadline) || ctx.Err() != nil {
			return nil, fmt.Errorf("connect to Temporal at %s (%d tries in %s; %s waits longer%s): %w",
				opts.HostPort, tries, time.Since(started).Round(time.Millisecond), EnvConnectWait, hint(opts, err), err)
		}
		log.Warn("Temporal is not reachable yet; trying again"+hint(opts, err), zap.String("temporal", opts.HostPort),
			zap.Duration("in", backoff), zap.Error(err))
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("connect to Temporal at %s: %w", opts.HostPort, errors.Join(err, ctx.Err()))
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, 5*time.Second)
	}
}

// Refusal returns, for an error of a call to Temporal made with opts, an
// error wrapping ErrRefused that says what failed and which variables to
// check when Temporal refused us, and nil when the server may only be not
// there yet (or the error is something else).
func Refusal(opts client.Options, err error) error {
	msg := err.Error()
	switch code := serviceerror.ToStatus(err).Code(); {
	case code == codes.Unauthenticated, code == codes.PermissionDenied:
		return fmt.Errorf("%w: %s at %s: %s; check %s", ErrRefused, authWord(code), opts.HostPort,
			statusMessage(err), credentialVars(opts))
	case code != codes.Unavailable && code != codes.Unknown:
		return nil
	}
	if cause := tlsCause(msg); cause != "" {
		hint := "check " + "TEMPORAL_TLS_*"
		if strings.Contains(cause, "does not look like a TLS handshake") {
			hint = "the server does not speak TLS: set " + EnvTLS + "=false, or check " + EnvAddress
		}
		if opts.ConnectionOptions.TLS == nil {
			hint = "the server may require TLS: set " + EnvTLS + "=true (and " + EnvTLSServerCACertPath + " for a private CA)"
		}
		return fmt.Errorf("%w: TLS handshake with %s: %s; %s", ErrRefused, opts.HostPort, cause, hint)
	}
	return nil
}

// hint says what to try when a server hung up on us without a word: a
// server that speaks only TLS does that to a plain-text client, and so does
// a load balancer with no live server behind it, so the dial waits, and
// says so.
func hint(opts client.Options, err error) string {
	if opts.ConnectionOptions.TLS == nil && plainToTLS(err.Error()) {
		return "; if the server requires TLS, set " + EnvTLS + "=true"
	}
	return ""
}

func authWord(code codes.Code) string {
	if code == codes.Unauthenticated {
		return "not authenticated"
	}
	return "permission denied"
}

// credentialVars names the variables of the credentials opts carries.
func credentialVars(opts client.Options) string {
	cert := opts.ConnectionOptions.TLS != nil && len(opts.ConnectionOptions.TLS.Certificates) > 0
	switch {
	case opts.Credentials != nil && cert:
		return EnvAPIKey + " and " + EnvTLSClientCertPath
	case cert:
		return EnvTLSClientCertPath + " (the server does not accept this client certificate)"
	case opts.Credentials != nil:
		return EnvAPIKey
	}
	return EnvAPIKey + " or " + EnvTLSClientCertPath + " (none is set)"
}

// statusMessage is the server's message, without the SDK's and gRPC's
// wrapping.
func statusMessage(err error) string {
	msg := serviceerror.ToStatus(err).Message()
	if _, after, ok := strings.Cut(msg, "desc = "); ok {
		msg = after
	}
	return strings.TrimPrefix(msg, "failed reaching server: ")
}

// tlsMarkers start the part of a gRPC transport error that says why a TLS
// handshake failed, as crypto/tls words it.
var tlsMarkers = []string{"remote error: ", "tls: ", "x509: "}

// grpcHandshake is gRPC's preamble to a failed handshake's cause.
const grpcHandshake = "authentication handshake failed: "

// tlsCause returns why a TLS handshake failed, from a dial error's text,
// or "" when it was not a TLS failure.
func tlsCause(msg string) string {
	at := -1
	for _, m := range tlsMarkers {
		if i := strings.Index(msg, m); i >= 0 && (at < 0 || i < at) {
			at = i
		}
	}
	if at < 0 {
		// A handshake cut short without a word (EOF, a reset) is what a
		// load balancer with no server behind it does too: no refusal.
		return ""
	}
	if i := strings.Index(msg, grpcHandshake); i >= 0 && i < at {
		at = i + len(grpcHandshake) // gRPC's words for the cause, when it has some
	}
	cause := msg[at:]
	if end := strings.IndexAny(cause, "\"\n"); end >= 0 {
		cause = cause[:end]
	}
	return strings.TrimSpace(cause)
}

// plainToTLS reports whether a dial error is what a plain-text client
// meets at a server that speaks only TLS: the server reads our HTTP/2
// preface as a bad TLS record and hangs up.
func plainToTLS(msg string) bool {
	return strings.Contains(msg, "error reading server preface") &&
		(strings.Contains(msg, "EOF") || strings.Contains(msg, "connection reset") || strings.Contains(msg, "frame too large"))
}

// Describe says how opts reach Temporal, for a banner or a log line:
// address, namespace, TLS and which credentials, never a secret.
func Describe(opts client.Options) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s, namespace %s", opts.HostPort, opts.Namespace)
	switch t := opts.ConnectionOptions.TLS; {
	case opts.ConnectionOptions.TLSDisabled || t == nil:
		b.WriteString(", plain text")
	case len(t.Certificates) > 0:
		b.WriteString(", TLS with a client certificate")
	default:
		b.WriteString(", TLS")
	}
	if t := opts.ConnectionOptions.TLS; t != nil && t.InsecureSkipVerify {
		b.WriteString(" (host verification off)")
	}
	if opts.Credentials != nil {
		b.WriteString(", API key")
	}
	return b.String()
}

// probeTLS tells, for a dial that failed without saying why, whether the
// server refuses our TLS: it makes a TLS connection of its own with opts'
// settings and waits a moment for the server's verdict. With TLS 1.3 a
// server that does not take our client certificate says so only after the
// handshake, and gRPC may meet the closed connection (a broken pipe)
// before it reads the server's alert. It returns nil when TLS is off, the
// server is not there, or the server took our handshake.
func probeTLS(ctx context.Context, opts client.Options) error {
	t := opts.ConnectionOptions.TLS
	if t == nil || opts.ConnectionOptions.TLSDisabled {
		return nil
	}
	cfg := t.Clone()
	cfg.NextProtos = []string{"h2"}
	if cfg.ServerName == "" {
		// As the SDK's gRPC connection over TLS: the address's host (it
		// applies TEMPORAL_CLIENT_AUTHORITY to plain-text connections only).
		host, _, err := net.SplitHostPort(opts.HostPort)
		if err != nil {
			return nil
		}
		cfg.ServerName = host
	}
	ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	raw, err := (&net.Dialer{}).DialContext(ctx, "tcp", opts.HostPort)
	if err != nil {
		return nil // not there: the dial waits
	}
	conn := tls.Client(raw, cfg)
	defer conn.Close()
	err = conn.HandshakeContext(ctx)
	if err == nil {
		_ = conn.SetReadDeadline(time.Now().Add(time.Second))
		_, err = conn.Read(make([]byte, 1))
	}
	if err == nil {
		return nil
	}
	if cause := tlsCause(err.Error()); cause != "" {
		return fmt.Errorf("%w: TLS handshake with %s: %s; check TEMPORAL_TLS_*", ErrRefused, opts.HostPort, cause)
	}
	return nil
}
