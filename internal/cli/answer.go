package cli

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"

	"github.com/spf13/cobra"

	"github.com/oncerun/oncerun/approvals"
	"github.com/oncerun/oncerun/internal/approvalstore"
	"github.com/oncerun/oncerun/internal/questions"
	"github.com/oncerun/oncerun/internal/untrusted"
	"github.com/oncerun/oncerun/workflows"
)

// answerFlags are the answer command's flags.
type answerFlags struct {
	tenant, runID, as string
	step              int64
	round             int
	action, content   string
	answers, note     string
	asJSON            bool
}

func newAnswerCmd(conn *connections) *cobra.Command {
	var f answerFlags
	cmd := &cobra.Command{
		Use:   "answer [--tenant T] --run-id R --step N (--content JSON | --action decline|cancel | --answers JSON)",
		Short: "Answer the questions a step's server asked a person",
		Long: `Answer a step whose tool's server asked a person a question in the middle of
the call (an MCP server's elicitation): oncerun approvals lists it, with the
schema the answer must match and who may answer.

  --content JSON   accept the round's one question with these values
                   ({"size": "M"}), which must match the question's schema
  --action A       accept (with --content), decline or cancel (dismiss)
  --answers JSON   answer each question of a round of several, by id:
                   {"size": {"action": "accept", "content": {"size": "M"}},
                    "gift": {"action": "decline"}}

The answer is recorded in the audit table (who, when, how, what) before it
reaches the run, by the same code whichever way it comes; the first answer
to a round is the answer of record: the same again is harmless, another is
refused. A question the server asked in the call's answer waits durably,
and the run sends the answer back under the step's key; one it asked over
its live session reaches it through the worker that holds the session,
and is lost if that worker stops first.

With ONCERUN_API set, the answer goes through the approvals service: your
token names you and your tenant. Without it, the command records the
answer with DATABASE_URL (via cli, role local) and signals the run through
Temporal.

--json prints the answer of record: run_id, step, round, answers,
answerer, role, note, answered_at and via, with repeated.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			req, err := f.request()
			if err != nil {
				return err
			}
			api, err := conn.api()
			if err != nil {
				return err
			}
			var res approvals.AnswerResponse
			if api != nil {
				if err := refuseInAPIMode(map[string]bool{"tenant": cmd.Flags().Changed("tenant"), "as": cmd.Flags().Changed("as")}); err != nil {
					return err
				}
				if res, err = api.Answer(cmd.Context(), f.runID, f.step, req); err != nil {
					return err
				}
			} else if res, err = answerDirect(cmd, conn, f, req); err != nil {
				return err
			}
			return printAnswer(cmd.OutOrStdout(), res, f.asJSON)
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&f.tenant, "tenant", "", "tenant of the run (required without ONCERUN_API)")
	fl.StringVar(&f.runID, "run-id", "", "the run's id (required)")
	fl.Int64Var(&f.step, "step", 0, "the step's number (required)")
	fl.StringVar(&f.content, "content", "", "accept the one question with these values, a JSON object")
	fl.StringVar(&f.action, "action", "", "accept, decline or cancel the one question (default accept with --content)")
	fl.StringVar(&f.answers, "answers", "", "answer each question by id, a JSON object of {action, content}")
	fl.StringVar(&f.note, "note", "", "a note recorded with the answer")
	fl.IntVar(&f.round, "round", 0, "the round you answer (default: the step's latest)")
	fl.StringVar(&f.as, "as", "", "your name, recorded with the answer (default $USER)")
	fl.BoolVar(&f.asJSON, "json", false, "print the answer of record as JSON")
	for _, name := range []string{"run-id", "step"} {
		_ = cmd.MarkFlagRequired(name)
	}
	return cmd
}

// request checks the flags that need no connection and makes the request,
// naming the flag that is wrong.
func (f answerFlags) request() (approvals.AnswerRequest, error) {
	if f.step < 1 {
		return approvals.AnswerRequest{}, fmt.Errorf("--step %d: steps are numbered from 1", f.step)
	}
	if f.round < 0 {
		return approvals.AnswerRequest{}, fmt.Errorf("--round %d: rounds are numbered from 1 (leave it out for the latest)", f.round)
	}
	if err := untrusted.Text("--note", f.note, workflows.MaxCommentBytes); err != nil {
		return approvals.AnswerRequest{}, err
	}
	req := approvals.AnswerRequest{Note: f.note, Round: f.round}
	if f.answers != "" {
		if f.action != "" || f.content != "" {
			return approvals.AnswerRequest{}, errors.New("--answers answers each question by id: give it alone, without --action or --content")
		}
		if err := untrusted.Decode([]byte(f.answers), &req.Answers); err != nil {
			return approvals.AnswerRequest{}, fmt.Errorf(`--answers: want {"<question id>": {"action": "accept", "content": {...}}, ...}: %w`, err)
		}
		return req, workflows.Answer{Step: f.step, Round: 1, Answers: req.Answers, Answerer: "x", Note: f.note}.Validate()
	}
	action := f.action
	if action == "" && f.content != "" {
		action = questions.ActionAccept
	}
	switch action {
	case questions.ActionAccept:
		if f.content == "" {
			return approvals.AnswerRequest{}, errors.New(`--action accept: give the values with --content '{"field": ...}'`)
		}
	case questions.ActionDecline, questions.ActionCancel:
		if f.content != "" {
			return approvals.AnswerRequest{}, fmt.Errorf("--content is given only to accept, not with --action %s", action)
		}
	case "":
		return approvals.AnswerRequest{}, errors.New("give --content JSON to accept, --action decline or cancel, or --answers JSON")
	default:
		return approvals.AnswerRequest{}, fmt.Errorf("--action %q: give accept, decline or cancel", action)
	}
	req.Action = action
	if f.content != "" {
		if err := untrusted.Value("--content", []byte(f.content), questions.MaxContentBytes); err != nil {
			return approvals.AnswerRequest{}, err
		}
		var obj map[string]json.RawMessage
		if json.Unmarshal([]byte(f.content), &obj) != nil || obj == nil {
			return approvals.AnswerRequest{}, fmt.Errorf("--content %s: want a JSON object of the question's fields", untrusted.Cut(f.content, 80))
		}
		req.Content = json.RawMessage(f.content)
	}
	return req, nil
}

// answerDirect answers without the approvals service, through the path
// every answer takes (runs.Client.Answer), via cli.
func answerDirect(cmd *cobra.Command, conn *connections, f answerFlags, req approvals.AnswerRequest) (approvals.AnswerResponse, error) {
	if f.tenant == "" {
		return approvals.AnswerResponse{}, errors.New("give --tenant T (or set ONCERUN_API to answer through the approvals service)")
	}
	answerer := f.as
	if answerer == "" {
		answerer = conn.env.User
	}
	if answerer == "" {
		return approvals.AnswerResponse{}, errors.New("give --as NAME: the answer needs an answerer's name")
	}
	if err := untrusted.Text("--as", answerer, workflows.MaxApproverBytes); err != nil {
		return approvals.AnswerResponse{}, err
	}
	rc, err := conn.client(cmd.Context(), true)
	if err != nil {
		return approvals.AnswerResponse{}, err
	}
	in := approvals.AnswerRequestInput(approvals.StepRequest{}, req)
	res, err := rc.Answer(cmd.Context(), rc.Pool, approvalstore.AnswerRequest{StepRequest: local(f.tenant, f.runID, f.step, req.Round, answerer),
		Answers: in.Answers, Only: in.Only, Note: req.Note})
	if err != nil {
		return approvals.AnswerResponse{}, err
	}
	rec, err := answerJSON(res.Record)
	if err != nil {
		return approvals.AnswerResponse{}, err
	}
	return approvals.AnswerResponse{Answer: rec, Repeated: res.Repeated}, nil
}

// answerJSON is an answer of record as the approvals API shows it.
func answerJSON(rec approvalstore.AnswerRecord) (approvals.AnswerRecord, error) {
	out := approvals.AnswerRecord{RunID: rec.RunID, Step: rec.Step, Round: rec.Round, Answerer: rec.Answerer, Role: approvals.Role(rec.Role),
		Note: rec.Note, AnsweredAt: rec.AnsweredAt, Via: rec.Via}
	if err := json.Unmarshal(rec.Answers, &out.Answers); err != nil {
		return approvals.AnswerRecord{}, fmt.Errorf("read the answer of record: %w", err)
	}
	return out, nil
}

func printAnswer(out io.Writer, res approvals.AnswerResponse, asJSON bool) error {
	if asJSON {
		return writeJSON(out, res)
	}
	a := res.Answer
	if res.Repeated {
		fmt.Fprintf(out, "round %d of step %d of run %s was already answered by %s at %s: %s\n",
			a.Round, a.Step, a.RunID, a.Answerer, when(a.AnsweredAt), answersText(a.Answers))
		return nil
	}
	fmt.Fprintf(out, "answered round %d of step %d of run %s as %s: %s\n", a.Round, a.Step, a.RunID, a.Answerer, answersText(a.Answers))
	return nil
}

// answersText says what a round's answers are, in one line.
func answersText(answers map[string]workflows.QuestionAnswer) string {
	parts := make([]string, 0, len(answers))
	for _, id := range slices.Sorted(maps.Keys(answers)) {
		a := answers[id]
		p := id + " " + a.Action
		if len(a.Content) > 0 {
			p += " " + oneLine(untrusted.Compact(a.Content))
		}
		parts = append(parts, p)
	}
	return strings.Join(parts, "; ")
}
