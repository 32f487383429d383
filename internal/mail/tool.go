package mail

import (
	"context"
	"encoding/json"
	"errors"

	"github.com/emersion/go-smtp"

	"github.com/oncerun/oncerun/tools"
)

// SendEmail is the name of the e-mail tool.
const SendEmail = "send_email"

const sendEmailSchema = `{"type":"object","properties":{
"to":{"type":"string","minLength":3,"maxLength":254,"pattern":"^[^\\s@<>]+@[^\\s@<>]+$"},
"subject":{"type":"string","minLength":1,"maxLength":900},
"body":{"type":"string","maxLength":100000}},
"required":["to","subject","body"],"additionalProperties":false}`

// errNotConfigured is send_email's answer on a worker with no SMTP server.
var errNotConfigured = errors.New("no SMTP server is configured (SMTP_ADDR)")

// Tool returns send_email, an external tool that sends a plain-text e-mail
// through c with a Message-ID derived from the step's key, so that
// receivers can drop duplicates. A nil c makes a tool that refuses every
// call, for plan checks where no server is configured.
//
// E-mail is at-least-once: SMTP has no idempotency key a server honours and
// no way to ask whether a message arrived. A message the server accepted is
// never sent again by oncerun; one whose acceptance nobody heard (the
// connection dropped after the message was written) waits for a person's
// resolve, and a person who answers not_applied may be wrong.
func Tool(c *Client, messageIDDomain string) tools.Tool {
	return tools.Tool{
		Name:        SendEmail,
		Description: "Send a plain-text e-mail to one recipient. At least once: a message whose delivery is in doubt waits for a person before it is sent again.",
		Schema:      json.RawMessage(sendEmailSchema),
		Class:       tools.ClassExternal,
		Run: func(ctx context.Context, call tools.Call) (any, error) {
			if c == nil {
				return nil, tools.Permanent(tools.NotApplied(errNotConfigured))
			}
			var a struct {
				To      string `json:"to"`
				Subject string `json:"subject"`
				Body    string `json:"body"`
			}
			if err := call.Decode(&a); err != nil {
				return nil, tools.Permanent(tools.NotApplied(err))
			}
			// A worker frozen past its key's lease sends nothing.
			if err := tools.BeforeSend(ctx); err != nil {
				return nil, err
			}
			r, err := c.Send(ctx, Message{To: []string{a.To}, Subject: a.Subject, Body: a.Body,
				MessageID: MessageID(call.Key.String(), messageIDDomain)})
			var reply *smtp.SMTPError
			switch {
			case errors.Is(err, ErrNotSent) && errors.As(err, &reply) && reply.Code >= 500:
				// A permanent refusal (of the sender, a recipient or the
				// message): sending again cannot help.
				return nil, tools.Permanent(tools.NotApplied(err))
			case errors.Is(err, ErrNotSent):
				return nil, tools.NotApplied(err)
			case err != nil:
				return nil, err
			}
			return Sent(r), nil
		},
	}
}

// Sent is send_email's result: the server accepted the message.
type Sent struct {
	MessageID string   `json:"message_id"`
	To        []string `json:"to"`
	Reply     string   `json:"reply,omitempty"`
}
