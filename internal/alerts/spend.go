package alerts

import (
	"context"
	"fmt"
	"net/url"
	"strconv"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/oncerun/oncerun/activities"
	"github.com/oncerun/oncerun/internal/money"
	"github.com/oncerun/oncerun/internal/spend"
)

// AlertSpendCap is the "alert" field of a [SpendCap].
const AlertSpendCap = "spend_cap"

// SpendCap is the body of a spend cap alert: a tenant's cap reached 80% or
// 100% of its amount in its window. Each fires once per window (the UTC
// day; 24 hours for a rolling cap); the charge that raised it recorded it
// in spend_alerts.
type SpendCap struct {
	// Alert is always AlertSpendCap.
	Alert string `json:"alert"`
	// ID is spend_cap/<tenant>/<cap>/<threshold>/<alert row>: the same
	// for every delivery of one alert, and the Idempotency-Key header.
	ID     string   `json:"id"`
	Tenant string   `json:"tenant"`
	Cap    string   `json:"cap"`
	Tools  []string `json:"tools"`
	// Period is utc_day or rolling_24h.
	Period string `json:"period"`
	// Threshold is 80 or 100 (percent).
	Threshold int    `json:"threshold"`
	Currency  string `json:"currency"`
	// Spent is what the cap counts once the charge that raised the alert
	// counted, and Amount the cap, both in minor units; SpentText and
	// AmountText are the same as money ("1,950.00 EUR").
	Spent      int64  `json:"spent"`
	Amount     int64  `json:"amount"`
	SpentText  string `json:"spent_text"`
	AmountText string `json:"amount_text"`
}

// NewSpendCap returns the body that tells of the alert l raised.
func NewSpendCap(tenant string, l spend.Level) SpendCap {
	return SpendCap{
		Alert: AlertSpendCap,
		ID: AlertSpendCap + "/" + url.PathEscape(tenant) + "/" + url.PathEscape(l.Cap) + "/" +
			strconv.Itoa(l.Alert) + "/" + strconv.FormatInt(l.AlertID, 10),
		Tenant: tenant, Cap: l.Cap, Tools: l.Tools, Period: l.Period, Threshold: l.Alert, Currency: l.Currency,
		Spent: l.Spent + l.This, Amount: l.Limit,
		SpentText: money.Format(l.Spent+l.This, l.Currency), AmountText: money.Format(l.Limit, l.Currency),
	}
}

// SpendAlerts delivers spend cap alerts (it is the worker's
// activities.SpendAlerter): one POST to the Webhook, and the delivery
// recorded in spend_alerts.
type SpendAlerts struct {
	// Webhook receives the alerts. Nil or without a URL: nothing is sent
	// and the alerts stay undelivered in spend_alerts.
	Webhook *Webhook
	Pool    *pgxpool.Pool
}

var _ activities.SpendAlerter = (*SpendAlerts)(nil)

// SpendAlert posts the alert l raised for tenant and records its delivery.
func (s *SpendAlerts) SpendAlert(ctx context.Context, tenant string, l spend.Level) error {
	if s.Webhook == nil || s.Webhook.URL == "" {
		return nil
	}
	body := NewSpendCap(tenant, l)
	if err := s.Webhook.Post(ctx, body, body.ID); err != nil {
		return fmt.Errorf("post spend alert %s: %w", body.ID, err)
	}
	return spend.AlertDelivered(ctx, s.Pool, l.AlertID)
}
