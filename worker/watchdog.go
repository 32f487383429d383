package worker

import (
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/oncerun/oncerun/internal/settings"
	"github.com/oncerun/oncerun/internal/watchdog"
)

// WatchdogConfig configures the expiry watchdog: its schedule's interval,
// its policy for keys of open runs, its batches and their duty cycle. Zero
// fields take the watchdog's defaults (5 minutes, hold, 250 keys, 0.05).
type WatchdogConfig = watchdog.Config

// WatchdogActivities carries what the expiry watchdog's activity needs;
// [NewWorker] registers it.
type WatchdogActivities = watchdog.Activities

// watchdogConfigFromEnv reads the expiry watchdog's variables. Each value
// is checked by [WatchdogConfig.Validate], and the error names the
// variable. A variable set to zero is refused rather than taken for the
// default: whoever set it meant something else.
func watchdogConfigFromEnv(getenv func(string) string) (WatchdogConfig, error) {
	var c WatchdogConfig
	vars := []struct {
		name, want string
		parse      func(s string) (zero bool, err error)
	}{
		{settings.EnvWatchdogInterval, "a duration such as " + watchdog.DefaultInterval.String(), func(s string) (bool, error) {
			d, err := time.ParseDuration(s)
			c.Interval = d
			return d == 0, err
		}},
		{settings.EnvWatchdogBatch, "an integer such as " + strconv.Itoa(watchdog.DefaultBatchSize), func(s string) (bool, error) {
			n, err := strconv.Atoi(s)
			c.BatchSize = n
			return n == 0, err
		}},
		{settings.EnvWatchdogDutyCycle, "a share such as " + strconv.FormatFloat(watchdog.DefaultDutyCycle, 'g', -1, 64), func(s string) (bool, error) {
			d, err := strconv.ParseFloat(s, 64)
			c.DutyCycle = d
			return d == 0, err
		}},
		{settings.EnvExpiryPolicy, "", func(s string) (bool, error) {
			c.Policy = s
			return false, nil
		}},
	}
	for _, v := range vars {
		s := getenv(v.name)
		if s == "" {
			continue
		}
		zero, err := v.parse(s)
		switch {
		case err != nil:
			return WatchdogConfig{}, fmt.Errorf("%s %q is not %s", v.name, s, v.want)
		case zero:
			err = errors.New("zero is not a setting; unset the variable for the default")
		default:
			err = c.Validate()
		}
		if err != nil {
			return WatchdogConfig{}, fmt.Errorf("%s %q: %w", v.name, s, err)
		}
	}
	return c, nil
}
