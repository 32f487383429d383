package watchdog_test

import (
	"fmt"
	"math"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/oncerun/oncerun/internal/watchdog"
)

func TestConfigWithDefaults(t *testing.T) {
	t.Parallel()
	assert.Equal(t, watchdog.Config{
		Interval: 5 * time.Minute, Policy: "hold", BatchSize: 250, MaxBatches: 100, DutyCycle: 0.05,
		ScheduleID: "oncerun-expiry-watchdog",
	}, watchdog.Config{}.WithDefaults())
	set := watchdog.Config{Interval: time.Hour, Policy: watchdog.PolicyPrune, BatchSize: 10, MaxBatches: 2, DutyCycle: 1, ScheduleID: "s"}
	assert.Equal(t, set, set.WithDefaults(), "fields set stay as they are")
}

func TestConfigValidateNamesTheField(t *testing.T) {
	t.Parallel()
	require.NoError(t, watchdog.Config{}.Validate(), "zero fields take their defaults")
	require.NoError(t, watchdog.Config{}.WithDefaults().Validate())
	for field, c := range map[string]watchdog.Config{
		"Interval":   {Interval: -time.Minute},
		"Policy":     {Policy: "forget"},
		"BatchSize":  {BatchSize: -1},
		"MaxBatches": {MaxBatches: -1},
		"DutyCycle":  {DutyCycle: 1.5},
	} {
		err := c.Validate()
		require.Error(t, err, field)
		assert.Contains(t, err.Error(), "Config."+field)
	}
	for _, d := range []float64{-0.1, math.NaN(), math.Inf(1)} {
		assert.Error(t, watchdog.Config{DutyCycle: d}.Validate(), "duty cycle %v", d)
	}
}

func ExampleConfig_WithDefaults() {
	c := watchdog.Config{Policy: watchdog.PolicyPrune}.WithDefaults()
	fmt.Println(c.Interval, c.Policy, c.BatchSize, c.MaxBatches, c.DutyCycle, c.ScheduleID)
	// Output: 5m0s prune 250 100 0.05 oncerun-expiry-watchdog
}
