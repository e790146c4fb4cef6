package console

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
	"unsafe"

	"github.com/stretchr/testify/require"
	"go.uber.org/zap"

	"github.com/rowlift/rowlift/coordinator/authz"
	"github.com/rowlift/rowlift/internal/testcerts"
	"github.com/rowlift/rowlift/internal/tlsfiles"
	rowliftv1 "github.com/rowlift/rowlift/proto/rowlift/v1"
)

func workflow(name string, lagMs int64) *rowliftv1.Workflow {
	return &rowliftv1.Workflow{Spec: &rowliftv1.WorkflowSpec{Name: name},
		Status: &rowliftv1.WorkflowStatus{LagMs: lagMs, Phase: rowliftv1.WorkflowPhase_WORKFLOW_PHASE_RUNNING}}
}

// TestHistoryBudget: the samples kept never cost more than the budget, the
// oldest samples of the workflow seen least recently give way first (so two
// workflows read in turn share it), and samples closer than sampleSpacing or
// older than the window are not kept.
func TestHistoryBudget(t *testing.T) {
	h := newHistory(100 * sampleBytes)
	now := time.Unix(1_800_000_000, 0)
	for i := range 80 {
		at := now.Add(time.Duration(i) * sampleSpacing)
		h.record(workflow("a", int64(i)), at)
		h.record(workflow("a", -1), at.Add(time.Millisecond)) // too close: not kept
		h.record(workflow("b", int64(i)), at.Add(time.Second))
		require.LessOrEqual(t, h.usedBytes(), 100*sampleBytes)
	}
	a, b := h.get("a"), h.get("b")
	require.Len(t, a.Samples, 50)
	require.Len(t, b.Samples, 50)
	require.Equal(t, int64(30), a.Samples[0].LagMs, "the oldest went")
	require.Equal(t, int64(79), a.Samples[49].LagMs)

	later := now.Add(window + 200*sampleSpacing)
	h.record(workflow("b", 7), later)
	require.Equal(t, []Sample{{AtMs: later.UnixMilli(), LagMs: 7}}, h.get("b").Samples, "samples older than the window go")
	require.Empty(t, h.get("a").Samples, "a workflow not seen for the window goes")
	require.Equal(t, sampleBytes, h.usedBytes())
}

// TestHistoryRates: the bytes and transactions per second of a sample are
// measured from the previous one; a stream counts only once a sample before
// had its position, a MariaDB domain counts its sequence numbers whichever
// server wrote them, the streams of a split count a source transaction once,
// and the streams' counts are within the budget.
func TestHistoryRates(t *testing.T) {
	const uuid = "3e11fa47-71ca-11e1-9e33-c80aa9429562"
	h := newHistory(DefaultHistoryBytes)
	now := time.Unix(1_800_000_000, 0)
	at := func(w *rowliftv1.Workflow, copied int64, positions ...string) *rowliftv1.Workflow {
		w.Status.BytesCopied = copied
		for i, p := range positions {
			w.Status.Streams = append(w.Status.Streams, &rowliftv1.StreamStatus{Source: fmt.Sprint("s", i), Target: "main",
				Position: &rowliftv1.Position{GtidSet: p}})
		}
		return w
	}
	h.record(at(workflow("my", 0), 0, uuid+":1-100", ""), now)
	h.record(at(workflow("my", 0), 4<<20, uuid+":1-300", uuid+":1-5000"), now.Add(2*time.Second))
	h.record(at(workflow("my", 0), 5<<20, uuid+":1-300:302-401", uuid+":1-5200"), now.Add(6*time.Second))
	h.record(at(workflow("maria", 0), 0, "0-1-100,1-1-7"), now)
	h.record(at(workflow("maria", 0), 0, "0-2-150,1-1-7"), now.Add(2*time.Second))

	var got [][2]float64
	for _, s := range h.get("my").Samples {
		got = append(got, [2]float64{s.BytesPerSecond, s.TransactionsPerSecond})
	}
	require.Equal(t, [][2]float64{{0, 0}, {2 << 20, 100}, {1 << 18, 75}}, got,
		"s1 starts with a position in the second sample: its 5,000 transactions are where it starts, not progress")
	require.Equal(t, 25.0, h.get("maria").Samples[1].TransactionsPerSecond, "domain 0 went from 100 to 150 across a failover to server 2")

	counts := 3 * (int(unsafe.Sizeof(streamCount{})) + len("s0") + len("s0→main")) // two streams of my, one of maria
	require.Equal(t, 5*sampleBytes+counts, h.usedBytes(), "every sample and the last counts of each stream are accounted")
	h.record(workflow("other", 0), now.Add(window+time.Hour))
	require.Equal(t, sampleBytes, h.usedBytes(), "and given back with the workflows")

	split := func(a, b string) *rowliftv1.Workflow {
		w := workflow("split", 0)
		for i, p := range []string{a, b} {
			w.Status.Streams = append(w.Status.Streams, &rowliftv1.StreamStatus{Source: "s", Target: fmt.Sprint("t", i),
				Position: &rowliftv1.Position{GtidSet: uuid + ":1-" + p}})
		}
		return w
	}
	h.record(split("100", "100"), now)
	h.record(split("300", "260"), now.Add(2*time.Second))
	require.Equal(t, 100.0, h.get("split").Samples[1].TransactionsPerSecond,
		"the two streams of a split read the same source transactions: they count once, as far as the furthest went")
}

// fake answers Stop and List; every other method is unimplemented.
type fake struct {
	rowliftv1.UnimplementedControlServer
}

func (fake) StopWorkflow(_ context.Context, ref *rowliftv1.WorkflowRef) (*rowliftv1.Workflow, error) {
	w := workflow(ref.GetName(), 0)
	w.Status.Phase = rowliftv1.WorkflowPhase_WORKFLOW_PHASE_STOPPED
	return w, nil
}

func (fake) ListWorkflows(context.Context, *rowliftv1.ListWorkflowsRequest) (*rowliftv1.ListWorkflowsResponse, error) {
	return &rowliftv1.ListWorkflowsResponse{Workflows: []*rowliftv1.Workflow{workflow("orders", 1500)}}, nil
}

// TestAuthorization: the console's calls pass the coordinator's interceptors
// with the browser's token, and a refusal reads as the CLI's.
func TestAuthorization(t *testing.T) {
	const admin, read = "admin-0123456789abcdef", "read-0123456789abcdef"
	tokens := filepath.Join(t.TempDir(), "tokens")
	require.NoError(t, os.WriteFile(tokens, []byte("admin "+admin+"\nread "+read+"\n"), 0o600))
	a, err := authz.New(authz.Config{TokenFile: tokens}, zap.NewNop())
	require.NoError(t, err)
	c, err := New(Config{Control: fake{}, ServerOptions: a.ServerOptions()})
	require.NoError(t, err)
	defer c.Close()
	srv := httptest.NewServer(c)
	defer srv.Close()

	do := func(method, path, token string, header bool) (int, map[string]any) {
		req, err := http.NewRequest(method, srv.URL+path, nil)
		require.NoError(t, err)
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		if header {
			req.Header.Set(actionHeader, "1")
		}
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		defer resp.Body.Close()
		var body map[string]any
		_ = json.NewDecoder(resp.Body).Decode(&body) // plain-text refusals leave it nil
		return resp.StatusCode, body
	}
	code, body := do("GET", "/api/workflows", "", false)
	require.Equal(t, http.StatusUnauthorized, code)
	require.Equal(t, "list workflows: ListWorkflows needs credentials: send a bearer token from the coordinator's --auth-token-file "+
		"(rowlift workflow --token-file FILE) (Unauthenticated)", body["error"])
	code, body = do("GET", "/api/workflows", read, false)
	require.Equal(t, http.StatusOK, code)
	require.Contains(t, fmt.Sprint(body["list"]), "orders")
	require.Len(t, c.hist.get("orders").Samples, 1, "a read feeds the charts")

	code, body = do("POST", "/api/workflows/orders/stop", read, true)
	require.Equal(t, http.StatusForbidden, code)
	require.Equal(t, "stop workflow orders: StopWorkflow needs the admin role, and this caller has the read role (its token has the read role): "+
		"use credentials with the admin role (PermissionDenied)", body["error"])
	code, _ = do("POST", "/api/workflows/orders/stop", admin, false)
	require.Equal(t, http.StatusForbidden, code, "an action without the console's header is refused before any call")
	code, body = do("POST", "/api/workflows/orders/stop", admin, true)
	require.Equal(t, http.StatusOK, code)
	require.Equal(t, "stopped workflow orders: stopped", body["message"])
	code, body = do("POST", "/api/workflows/orders/switch", admin, true)
	require.Equal(t, http.StatusInternalServerError, code)
	require.True(t, strings.HasPrefix(body["error"].(string), "switch workflow orders: "), "%v", body)

	resp, err := http.Get(srv.URL + "/")
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode, "the pages themselves need no token: every datum behind them does")
	require.Contains(t, resp.Header.Get("Content-Security-Policy"), "default-src 'self'")
}

// TestCertificateIdentities: over HTTPS with a CA, a browser's verified client
// certificate reaches the coordinator's interceptors as the CLI's does, so
// --auth-*-identity gives it its role: an admin certificate acts, a read one
// reads and is refused an action in the CLI's words, an unmapped one is
// refused, and no certificate or one of another CA gets no further than the
// TLS handshake. Each certificate keeps its own role whatever the others
// did, and the connections kept for certificates stay within their bound.
func TestCertificateIdentities(t *testing.T) {
	ca := testcerts.NewCA(t)
	server, ops, viewer, stranger := ca.Issue(t, "coordinator"), ca.Issue(t, "ops"), ca.Issue(t, "viewer"), ca.Issue(t, "stranger")
	a, err := authz.New(authz.Config{AdminIdentities: []string{"ops"}, ReadIdentities: []string{"viewer"}}, zap.NewNop())
	require.NoError(t, err)
	c, err := New(Config{Control: fake{}, ServerOptions: a.ServerOptions()})
	require.NoError(t, err)
	defer c.Close()
	tlsConfig, err := tlsfiles.Server(tlsfiles.Files{Cert: server.Cert, Key: server.Key, CA: ca.Cert}, zap.NewNop())
	require.NoError(t, err)
	lis, err := Listen("127.0.0.1:0", tlsConfig)
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() { _ = c.Serve(ctx, lis) }()
	base := "https://" + lis.Addr().String()

	roots := x509.NewCertPool()
	pem, err := os.ReadFile(ca.Cert)
	require.NoError(t, err)
	require.True(t, roots.AppendCertsFromPEM(pem))
	// browser is a client that presents pair (none when nil) on its own connections.
	browser := func(pair *testcerts.Pair) *http.Client {
		cfg := &tls.Config{RootCAs: roots, MinVersion: tls.VersionTLS12}
		if pair != nil {
			cert, err := tls.LoadX509KeyPair(pair.Cert, pair.Key)
			require.NoError(t, err)
			cfg.Certificates = []tls.Certificate{cert}
		}
		tr := &http.Transport{TLSClientConfig: cfg}
		t.Cleanup(tr.CloseIdleConnections)
		return &http.Client{Transport: tr}
	}
	do := func(b *http.Client, method, path string) (int, map[string]any) {
		t.Helper()
		req, err := http.NewRequest(method, base+path, nil)
		require.NoError(t, err)
		req.Header.Set(actionHeader, "1")
		resp, err := b.Do(req)
		require.NoError(t, err)
		defer resp.Body.Close()
		var body map[string]any
		require.NoError(t, json.NewDecoder(resp.Body).Decode(&body))
		return resp.StatusCode, body
	}

	admin, reader, unmapped := browser(&ops), browser(&viewer), browser(&stranger)
	code, body := do(admin, "POST", "/api/workflows/orders/stop")
	require.Equal(t, http.StatusOK, code, "%v", body)
	require.Equal(t, "stopped workflow orders: stopped", body["message"])

	code, body = do(reader, "GET", "/api/workflows")
	require.Equal(t, http.StatusOK, code, "%v", body)
	require.Contains(t, fmt.Sprint(body["list"]), "orders")
	code, body = do(reader, "POST", "/api/workflows/orders/stop")
	require.Equal(t, http.StatusForbidden, code)
	require.Equal(t, "stop workflow orders: StopWorkflow needs the admin role, and this caller has the read role "+
		"(its client certificate viewer has the read role): use credentials with the admin role (PermissionDenied)", body["error"])

	for _, path := range []string{"/api/workflows", "/api/workflows/orders/stop"} {
		code, body = do(unmapped, map[bool]string{true: "GET", false: "POST"}[path == "/api/workflows"], path)
		require.Equal(t, http.StatusUnauthorized, code)
		require.Contains(t, body["error"], "needs credentials: send a client certificate whose common name or DNS name the coordinator maps "+
			"with --auth-admin-identity or --auth-read-identity (this one's names, stranger, localhost, are not mapped) (Unauthenticated)")
	}

	other := testcerts.NewCA(t).Issue(t, "ops") // the admin's name, from a CA the console does not trust
	for what, b := range map[string]*http.Client{"no certificate": browser(nil), "another CA's certificate": browser(&other)} {
		resp, err := b.Get(base + "/api/workflows")
		if err == nil {
			resp.Body.Close()
		}
		require.Error(t, err, "%s is refused at the handshake", what)
	}

	for i := range maxPeers + 3 {
		pair := ca.Issue(t, fmt.Sprintf("peer%d", i))
		code, _ := do(browser(&pair), "GET", "/api/workflows")
		require.Equal(t, http.StatusUnauthorized, code)
		require.LessOrEqual(t, c.control.peers(), maxPeers)
	}
	code, body = do(admin, "POST", "/api/workflows/orders/stop")
	require.Equal(t, http.StatusOK, code, "an evicted certificate's connection is made again: %v", body)
	code, _ = do(reader, "POST", "/api/workflows/orders/stop")
	require.Equal(t, http.StatusForbidden, code)
}
