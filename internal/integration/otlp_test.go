package integration

import (
	"encoding/hex"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"

	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	"google.golang.org/protobuf/proto"
)

// receivedSpan is one span an OTLP exporter sent, as the receiver decoded
// it from the protobuf.
type receivedSpan struct {
	Service  string
	Name     string
	TraceID  string
	SpanID   string
	ParentID string
	Attrs    map[string]string
	Start    uint64
	End      uint64
	Status   int32
	// Links are the spans this one links to, as trace id/span id.
	Links []string
}

// otlpReceiver is an OTLP/HTTP endpoint (POST /v1/traces, protobuf) that
// keeps every span it is sent.
type otlpReceiver struct {
	srv   *httptest.Server
	mu    sync.Mutex
	spans []receivedSpan
}

func startOTLPReceiver(t testing.TB) *otlpReceiver {
	t.Helper()
	r := &otlpReceiver{}
	r.srv = httptest.NewServer(http.HandlerFunc(r.export))
	t.Cleanup(r.srv.Close)
	return r
}

// URL is the receiver's base, for OTEL_EXPORTER_OTLP_ENDPOINT.
func (r *otlpReceiver) URL() string { return r.srv.URL }

func (r *otlpReceiver) export(w http.ResponseWriter, req *http.Request) {
	if req.Method != http.MethodPost || req.URL.Path != "/v1/traces" {
		http.Error(w, "POST /v1/traces only", http.StatusNotFound)
		return
	}
	body, err := io.ReadAll(req.Body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	var in coltracepb.ExportTraceServiceRequest
	if err := proto.Unmarshal(body, &in); err != nil {
		http.Error(w, "not an OTLP trace export: "+err.Error(), http.StatusBadRequest)
		return
	}
	var got []receivedSpan
	for _, rs := range in.ResourceSpans {
		service := attrString(rs.GetResource().GetAttributes(), "service.name")
		for _, ss := range rs.ScopeSpans {
			for _, s := range ss.Spans {
				attrs := map[string]string{}
				for _, kv := range s.Attributes {
					attrs[kv.Key] = anyString(kv.Value)
				}
				var links []string
				for _, l := range s.Links {
					links = append(links, hex.EncodeToString(l.TraceId)+"/"+hex.EncodeToString(l.SpanId))
				}
				got = append(got, receivedSpan{Links: links, Service: service, Name: s.Name, TraceID: hex.EncodeToString(s.TraceId),
					SpanID: hex.EncodeToString(s.SpanId), ParentID: hex.EncodeToString(s.ParentSpanId), Attrs: attrs,
					Start: s.StartTimeUnixNano, End: s.EndTimeUnixNano, Status: int32(s.GetStatus().GetCode())})
			}
		}
	}
	r.mu.Lock()
	r.spans = append(r.spans, got...)
	r.mu.Unlock()
	out, _ := proto.Marshal(&coltracepb.ExportTraceServiceResponse{})
	w.Header().Set("Content-Type", "application/x-protobuf")
	_, _ = w.Write(out)
}

// Spans returns the spans received so far.
func (r *otlpReceiver) Spans() []receivedSpan {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]receivedSpan(nil), r.spans...)
}

// named returns the received spans whose name starts with prefix and whose
// attributes hold every pair of want.
func (r *otlpReceiver) named(prefix string, want map[string]string) []receivedSpan {
	var out []receivedSpan
next:
	for _, s := range r.Spans() {
		if !strings.HasPrefix(s.Name, prefix) {
			continue
		}
		for k, v := range want {
			if s.Attrs[k] != v {
				continue next
			}
		}
		out = append(out, s)
	}
	return out
}

func attrString(kvs []*commonpb.KeyValue, key string) string {
	for _, kv := range kvs {
		if kv.Key == key {
			return anyString(kv.Value)
		}
	}
	return ""
}

// anyString is an attribute's value as text.
func anyString(v *commonpb.AnyValue) string {
	switch x := v.GetValue().(type) {
	case *commonpb.AnyValue_StringValue:
		return x.StringValue
	case *commonpb.AnyValue_IntValue:
		return strconv.FormatInt(x.IntValue, 10)
	case *commonpb.AnyValue_BoolValue:
		if x.BoolValue {
			return "true"
		}
		return "false"
	}
	return v.String()
}
