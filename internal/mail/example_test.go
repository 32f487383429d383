package mail_test

import (
	"context"
	"errors"
	"fmt"

	"github.com/oncerun/oncerun/internal/mail"
	"github.com/oncerun/oncerun/internal/mail/mailtest"
)

func ExampleClient_Send() {
	srv, err := mailtest.Start(mailtest.Config{})
	if err != nil {
		panic(err)
	}
	defer srv.Close()
	client, err := mail.New(mail.Config{Addr: srv.Addr()})
	if err != nil {
		panic(err)
	}

	_, err = client.Send(context.Background(), mail.Message{
		To:        []string{"ops@example.com"},
		Subject:   "Refund approved",
		Body:      "The refund for order 42 was issued.\n",
		MessageID: mail.MessageID("run-42/step-7", "oncerun.example"),
	})
	switch {
	case errors.Is(err, mail.ErrUnknown):
		fmt.Println("may have been sent: retry with the same MessageID or ask a human")
	case errors.Is(err, mail.ErrNotSent):
		fmt.Println("not sent: safe to retry")
	case err != nil:
		panic(err)
	default:
		got := srv.Messages()[0]
		fmt.Println(got.Subject)
		fmt.Println(got.MessageID)
	}
	// Output:
	// Refund approved
	// <37a90377bcf7b08cc847c6b3889a9b6f@oncerun.example>
}
