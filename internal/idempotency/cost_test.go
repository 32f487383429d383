package idempotency_test

import (
	"context"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
)

// clockTick is the unit of the CPU times in /proc/<pid>/stat (USER_HZ).
const clockTick = 10 * time.Millisecond

// costMeter measures what a benchmark's calls cost beyond wall time, which
// on a shared machine moves with the neighbours: CPU of the benchmark
// process and CPU of the pool's PostgreSQL backends (read from /proc, so
// only when the server runs on this machine). Each is divided by b.N and
// reported as a metric. (WAL is not: the server's WAL position also moves
// with every other database on it.)
type costMeter struct {
	pool     *pgxpool.Pool
	client   time.Duration
	backends map[int]time.Duration
}

// startCost warms pool up to conns connections, so that their backends
// exist, and takes the first readings.
func startCost(b *testing.B, pool *pgxpool.Pool, conns int) *costMeter {
	b.Helper()
	ctx := context.Background()
	held := make([]*pgxpool.Conn, 0, conns)
	for range conns {
		c, err := pool.Acquire(ctx)
		if err != nil {
			b.Fatal(err)
		}
		held = append(held, c)
	}
	for _, c := range held {
		c.Release()
	}
	m := &costMeter{pool: pool, client: processCPU(), backends: map[int]time.Duration{}}
	for _, pid := range m.backendPIDs(b) {
		m.backends[pid] = backendCPU(pid)
	}
	return m
}

// report reports the costs since startCost per call of b.N.
func (m *costMeter) report(b *testing.B) {
	b.Helper()
	n := float64(b.N)
	b.ReportMetric(float64((processCPU()-m.client).Microseconds())/n, "client-cpu-µs/op")
	var server time.Duration
	readable := false
	for _, pid := range m.backendPIDs(b) {
		if now := backendCPU(pid); now >= 0 {
			readable = true
			server += now - max(m.backends[pid], 0)
		}
	}
	if readable {
		b.ReportMetric(float64(server.Microseconds())/n, "server-cpu-µs/op")
	}
}

// backendPIDs lists the backends connected to the pool's database.
func (m *costMeter) backendPIDs(b *testing.B) []int {
	b.Helper()
	rows, err := m.pool.Query(context.Background(),
		`SELECT pid FROM pg_stat_activity WHERE datname = current_database()`)
	if err != nil {
		b.Fatal(err)
	}
	var pids []int
	for rows.Next() {
		var pid int
		if err := rows.Scan(&pid); err != nil {
			b.Fatal(err)
		}
		pids = append(pids, pid)
	}
	if err := rows.Err(); err != nil {
		b.Fatal(err)
	}
	return pids
}

// processCPU is the CPU time, user and system, of this process so far.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// backendCPU is the CPU time, user and system, of process pid so far, or -1
// when /proc cannot tell (the server runs elsewhere).
func backendCPU(pid int) time.Duration {
	stat, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return -1
	}
	// The command name, field 2, is in parentheses and may hold spaces;
	// utime and stime are fields 14 and 15.
	s := string(stat)
	fields := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	if len(fields) < 13 {
		return -1
	}
	utime, err1 := strconv.ParseInt(fields[11], 10, 64)
	stime, err2 := strconv.ParseInt(fields[12], 10, 64)
	if err1 != nil || err2 != nil {
		return -1
	}
	return time.Duration(utime+stime) * clockTick
}
