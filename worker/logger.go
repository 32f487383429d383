package worker

import (
	"go.temporal.io/sdk/log"
	"go.uber.org/zap"
)

// temporalLogger adapts zap to the Temporal SDK's logger: the SDK's
// key-value pairs become zap fields.
type temporalLogger struct{ s *zap.SugaredLogger }

// TemporalLogger returns l as a Temporal SDK logger.
func TemporalLogger(l *zap.Logger) log.Logger {
	return temporalLogger{l.WithOptions(zap.AddCallerSkip(1)).Sugar()}
}

func (l temporalLogger) Debug(msg string, kv ...any) { l.s.Debugw(msg, kv...) }
func (l temporalLogger) Info(msg string, kv ...any)  { l.s.Infow(msg, kv...) }
func (l temporalLogger) Warn(msg string, kv ...any)  { l.s.Warnw(msg, kv...) }
func (l temporalLogger) Error(msg string, kv ...any) { l.s.Errorw(msg, kv...) }

// With returns a logger that adds kv to every line.
func (l temporalLogger) With(kv ...any) log.Logger { return temporalLogger{l.s.With(kv...)} }
