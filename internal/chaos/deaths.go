package chaos

import (
	"bufio"
	"encoding/json"
	"os"
	"strings"
)

// crashPoints counts, from the workers' logs, where the crash faults put
// the workers' deaths: the worker logs the point just before it kills
// itself.
func (h *harness) crashPoints() map[string]int {
	points := map[string]int{}
	for _, w := range h.workers {
		f, err := os.Open(w.logPath)
		if err != nil {
			continue
		}
		sc := bufio.NewScanner(f)
		sc.Buffer(make([]byte, 0, 64*1024), 1<<20)
		for sc.Scan() {
			line := sc.Bytes()
			if !strings.Contains(string(line), `"fault injection: killing this worker`) {
				continue
			}
			var entry struct {
				Point string `json:"point"`
			}
			if json.Unmarshal(line, &entry) == nil && entry.Point != "" {
				points[entry.Point]++
			}
		}
		f.Close()
	}
	return points
}
