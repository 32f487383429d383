package cli

import (
	"fmt"
	"io"
	"net/url"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/oncerun/oncerun/approvals"
	"github.com/oncerun/oncerun/internal/approvalstore"
	"github.com/oncerun/oncerun/internal/keys"
	"github.com/oncerun/oncerun/internal/untrusted"
)

// Environment variables of the CLI's API mode.
const (
	// EnvAPI is the approvals service's URL; when set, start, status,
	// watch, approvals, approve, reject, resolve, cancel, pause, resume,
	// message and limits go through it.
	EnvAPI = "ONCERUN_API"
	// EnvToken is the bearer token for EnvAPI.
	EnvToken = "ONCERUN_TOKEN"
)

// api returns the approvals API client, or nil when ONCERUN_API is not set.
func (c *connections) api() (*approvals.Client, error) {
	if c.env.APIURL == "" {
		return nil, nil
	}
	if c.env.Token == "" {
		return nil, fmt.Errorf("%s is set but %s is not: the API needs your token", EnvAPI, EnvToken)
	}
	u, err := url.Parse(c.env.APIURL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("%s %s is not an http or https URL such as https://approvals.example.com", EnvAPI, untrusted.Redact(c.env.APIURL))
	}
	return &approvals.Client{BaseURL: c.env.APIURL, Token: c.env.Token}, nil
}

// checkTenant checks a --tenant that filters a list: empty (every tenant)
// or a tenant a key can hold, so that nothing else reaches the database.
func checkTenant(tenant string) error {
	if tenant == "" {
		return nil
	}
	if _, err := keys.New(tenant, "run", 1, "tool"); err != nil {
		return fmt.Errorf("--tenant: %w", err)
	}
	return nil
}

// refuseInAPIMode names the flags that mean nothing through the API.
func refuseInAPIMode(flags map[string]bool) error {
	var set []string
	for name, isSet := range flags {
		if isSet {
			set = append(set, "--"+name)
		}
	}
	if len(set) == 0 {
		return nil
	}
	return fmt.Errorf("%s with %s set: the tenant and your name come from your token (%s)",
		strings.Join(set, ", "), EnvAPI, EnvToken)
}

func printItems(out io.Writer, items []approvals.Item, view approvals.View, wide bool) error {
	if len(items) == 0 {
		fmt.Fprintf(out, "no step is %s\n", map[approvals.View]string{
			approvals.ViewPending: "waiting for approval", approvals.ViewDecided: "decided",
			approvals.ViewNeedsResolution: "in need of resolution"}[view])
		return nil
	}
	tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "RUN\tSTEP\tTOOL\tKIND\tAMOUNT\tARGS\tSTATE\tREQUESTED\tDEADLINE\tLEFT\tPROBLEM")
	now := time.Now()
	for _, it := range items {
		// What went wrong is a paragraph: it goes last, cut to a line
		// unless --wide, so that it never breaks the columns before it.
		problem := strings.TrimSpace(it.Problem + " " + it.Withdrawn)
		if it.Kind == approvals.KindQuestion {
			problem = it.Reason
		}
		kind := it.Kind
		switch {
		case kind == "":
			// A service of an earlier release lists approvals only.
			kind = approvals.KindApproval
		case it.ApprovalKind == approvalstore.KindLimit:
			kind = "limit"
		}
		remaining := ""
		if it.State == "pending" {
			remaining = left(now, it.Deadline)
		}
		fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", it.RunID, it.Step, it.Tool, kind, amountCell(it.Amounts), cell(string(it.Args), wide),
			it.State, when(it.RequestedAt), when(it.Deadline), remaining, cell(problem, wide))
	}
	return tw.Flush()
}

// amountCell is a step's declared amounts as money, "-" when it has none.
func amountCell(amounts []approvals.Money) string {
	if len(amounts) == 0 {
		return "-"
	}
	parts := make([]string, len(amounts))
	for i, m := range amounts {
		parts[i] = m.Text
	}
	return strings.Join(parts, ", ")
}
