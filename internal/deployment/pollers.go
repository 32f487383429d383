package deployment

import (
	"context"
	"fmt"
	"slices"
	"strings"

	enumspb "go.temporal.io/api/enums/v1"
	taskqueuepb "go.temporal.io/api/taskqueue/v1"
	"go.temporal.io/sdk/client"
)

// Partitions is how many partitions of a task queue [Pollers] asks about:
// Temporal's default number of a task queue's read partitions
// (matching.numTaskqueueReadPartitions).
const Partitions = 4

// Pollers lists the pollers Temporal has seen on the workflow task queue q
// in the last minutes (its poller history, five minutes by default), one
// entry per identity and version, sorted by identity. Temporal answers for
// one partition of a queue at a time, and each poll goes to one partition:
// Pollers asks the first [Partitions] of them, as the temporal CLI's
// --partitions-legacy does. The root partition's failure is the error;
// another's leaves its pollers out.
func Pollers(ctx context.Context, tc client.Client, q string) ([]*taskqueuepb.PollerInfo, error) {
	type key struct{ identity, deployment, buildID string }
	seen := map[key]*taskqueuepb.PollerInfo{}
	for i := range Partitions {
		name := q
		if i > 0 {
			name = fmt.Sprintf("/_sys/%s/%d", q, i)
		}
		resp, err := tc.DescribeTaskQueue(ctx, name, enumspb.TASK_QUEUE_TYPE_WORKFLOW)
		if err != nil {
			if i == 0 {
				return nil, fmt.Errorf("describe task queue %s: %w", q, err)
			}
			continue
		}
		for _, p := range resp.GetPollers() {
			k := key{p.GetIdentity(), p.GetDeploymentOptions().GetDeploymentName(), p.GetDeploymentOptions().GetBuildId()}
			if was, ok := seen[k]; !ok || was.GetLastAccessTime().AsTime().Before(p.GetLastAccessTime().AsTime()) {
				seen[k] = p
			}
		}
	}
	out := make([]*taskqueuepb.PollerInfo, 0, len(seen))
	for _, p := range seen {
		out = append(out, p)
	}
	slices.SortFunc(out, func(a, b *taskqueuepb.PollerInfo) int {
		return strings.Compare(a.GetIdentity()+"\x00"+a.GetDeploymentOptions().GetBuildId(), b.GetIdentity()+"\x00"+b.GetDeploymentOptions().GetBuildId())
	})
	return out, nil
}
