package worker

import (
	"go.temporal.io/sdk/log"
	"go.uber.org/zap"
)

// sdkLogger adapts zap to the Temporal SDK's logger: the SDK's key-value
// pairs become zap fields.
type sdkLogger struct{ s *zap.SugaredLogger }

// temporalLogger returns l as a Temporal SDK logger.
func temporalLogger(l *zap.Logger) log.Logger {
	return sdkLogger{l.WithOptions(zap.AddCallerSkip(1)).Sugar()}
}

func (l sdkLogger) Debug(msg string, kv ...any) { l.s.Debugw(msg, kv...) }
func (l sdkLogger) Info(msg string, kv ...any)  { l.s.Infow(msg, kv...) }
func (l sdkLogger) Warn(msg string, kv ...any)  { l.s.Warnw(msg, kv...) }
func (l sdkLogger) Error(msg string, kv ...any) { l.s.Errorw(msg, kv...) }

// With returns a logger that adds kv to every line.
func (l sdkLogger) With(kv ...any) log.Logger { return sdkLogger{l.s.With(kv...)} }
