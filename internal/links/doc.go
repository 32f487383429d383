// Package links tells a worker process whether it can reach the parts it
// cannot work without, PostgreSQL and Temporal, from probes of its own
// rather than from its work's errors: a query that hangs on a black-holed
// connection says nothing until its deadline, which for a workflow task
// holding a local step is tens of seconds, while a probe on its own
// connection, bounded by the cut-off threshold, says it within seconds.
//
// A [Monitor] probes each [Link] every [Config.Interval]. A link whose last
// answer is older than [Config.CutOffAfter] is cut off; it is reachable
// again at its next answer. The worker (package worker) gives its work
// back while any link is cut off, and takes work again once all answer.
package links
