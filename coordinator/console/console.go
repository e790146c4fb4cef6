// Package console is the coordinator's web console: pages that show every
// workflow's progress, lag, streams, verify and cutover, and buttons for the
// operator's actions. Every page read and every action is a Control API call
// made with the browser's bearer token and the client certificate it
// presented to the console, through the coordinator's own interceptors
// (inproc.go), so the console may do exactly what those credentials may do
// with `rowlift workflow`, and says what the CLI says when refused. Its
// assets are embedded: no build step, no CDN.
package console

import (
	"context"
	"crypto/tls"
	"embed"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"net/http"
	"strings"
	"time"

	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	"github.com/rowlift/rowlift/internal/statustext"
	rowliftv1 "github.com/rowlift/rowlift/proto/rowlift/v1"
)

//go:embed assets
var assets embed.FS

const (
	// DefaultSampleEvery is how often the console reads every workflow for
	// the charts while no page asks, when Config leaves it 0.
	DefaultSampleEvery = 10 * time.Second
	// callTimeout bounds a page's read, as the CLI's --timeout default does.
	callTimeout = time.Minute
	// switchTimeout is the wait for the streams a switch or reverse allows,
	// the CLI's --timeout default.
	switchTimeout = time.Minute
	// switchMaxLag is the lag a switch or reverse accepts, the CLI's --max-lag default.
	switchMaxLag = 5 * time.Second
	// actionHeader must be on every action: a cross-site form cannot set it, so
	// a page elsewhere cannot make a browser act on an open console.
	actionHeader = "X-Rowlift-Console"
)

// Config is what the console serves from.
type Config struct {
	// Control is the coordinator's Control service.
	Control rowliftv1.ControlServer
	// ServerOptions are what every console call goes through: the
	// coordinator's authorization interceptors, none when the API is open.
	ServerOptions []grpc.ServerOption
	Logger        *zap.Logger
	// HistoryBytes bounds the charts' memory; 0 is DefaultHistoryBytes.
	HistoryBytes int
	// SampleEvery is how often Run reads every workflow for the charts; 0 is
	// DefaultSampleEvery.
	SampleEvery time.Duration
}

// Console is the web console's HTTP handler and the sampler of its charts.
type Console struct {
	cfg     Config
	log     *zap.Logger
	control *inproc
	hist    *history
	mux     *http.ServeMux
}

// New starts the in-process Control client the console calls through.
func New(cfg Config) (*Console, error) {
	if cfg.Logger == nil {
		cfg.Logger = zap.NewNop()
	}
	if cfg.SampleEvery <= 0 {
		cfg.SampleEvery = DefaultSampleEvery
	}
	p, err := startInproc(cfg.Control, cfg.ServerOptions)
	if err != nil {
		return nil, err
	}
	c := &Console{cfg: cfg, log: cfg.Logger.Named("console"), control: p, hist: newHistory(cfg.HistoryBytes), mux: http.NewServeMux()}
	static, err := fs.Sub(assets, "assets")
	if err != nil {
		return nil, fmt.Errorf("console: embedded assets: %w", err)
	}
	c.mux.Handle("GET /", http.FileServerFS(static))
	c.mux.HandleFunc("GET /api/workflows", c.list)
	c.mux.HandleFunc("GET /api/workflows/{name}", c.get)
	c.mux.HandleFunc("POST /api/workflows/{name}/{action}", c.act)
	return c, nil
}

// Close stops the in-process Control client.
func (c *Console) Close() { c.control.close() }

// ServeHTTP serves the pages and their API, with headers that keep other
// sites' scripts and frames away from them.
func (c *Console) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h := w.Header()
	h.Set("Content-Security-Policy", "default-src 'self'; img-src 'self' data:; frame-ancestors 'none'; form-action 'self'")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Referrer-Policy", "no-referrer")
	h.Set("Cache-Control", "no-store")
	c.mux.ServeHTTP(w, r)
}

// Run reads every workflow each SampleEvery until ctx ends, so the charts
// cover the time no page was open. It calls the service directly: the
// coordinator reading its own status needs no credentials, and the history
// is only shown to a caller whose GetWorkflow passed the interceptors.
func (c *Console) Run(ctx context.Context) {
	tick := time.NewTicker(c.cfg.SampleEvery)
	defer tick.Stop()
	for {
		if resp, err := c.cfg.Control.ListWorkflows(ctx, &rowliftv1.ListWorkflowsRequest{}); err == nil {
			for _, wf := range resp.GetWorkflows() {
				c.hist.record(wf, time.Now())
			}
		} else if ctx.Err() == nil {
			c.log.Debug("sampling the workflows for the charts failed", zap.Error(err))
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// Listen opens the console's listener on addr, over TLS when tlsConfig is not
// nil, so that a port in use fails the coordinator's start.
func Listen(addr string, tlsConfig *tls.Config) (net.Listener, error) {
	lis, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("console: listen on %s: %w", addr, err)
	}
	if tlsConfig != nil {
		lis = tls.NewListener(lis, tlsConfig)
	}
	return lis, nil
}

// Serve serves the console on lis until ctx ends.
func (c *Console) Serve(ctx context.Context, lis net.Listener) error {
	srv := &http.Server{Handler: c, ReadHeaderTimeout: 10 * time.Second, ErrorLog: zap.NewStdLog(c.log)}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(lis) }()
	select {
	case err := <-errc:
		return fmt.Errorf("console: serve on %s: %w", lis.Addr(), err)
	case <-ctx.Done():
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx) // open polls end with the process anyway
		return nil
	}
}

// caller is how a request calls the Control service as the browser: the
// client whose connection carries the client certificate the browser
// presented to the console (none without one), and a context carrying its
// authorization header. done ends both.
func (c *Console) caller(r *http.Request) (client rowliftv1.ControlClient, ctx context.Context, done func(), err error) {
	client, release, err := c.control.client(r.TLS)
	if err != nil {
		return nil, nil, nil, err
	}
	ctx, cancel := context.WithTimeout(r.Context(), callTimeout)
	if auth := r.Header.Get("Authorization"); auth != "" {
		ctx = metadata.AppendToOutgoingContext(ctx, "authorization", auth)
	}
	return client, ctx, func() { cancel(); release() }, nil
}

func (c *Console) list(w http.ResponseWriter, r *http.Request) {
	client, ctx, done, err := c.caller(r)
	if err != nil {
		c.fail(w, r, "list workflows", err)
		return
	}
	defer done()
	resp, err := client.ListWorkflows(ctx, &rowliftv1.ListWorkflowsRequest{})
	if err != nil {
		c.fail(w, r, "list workflows", err)
		return
	}
	for _, wf := range resp.GetWorkflows() {
		c.hist.record(wf, time.Now())
	}
	c.reply(w, map[string]any{"list": protoJSON(resp)})
}

func (c *Console) get(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("name")
	what := "show workflow " + name
	client, ctx, done, err := c.caller(r)
	if err != nil {
		c.fail(w, r, what, err)
		return
	}
	defer done()
	wf, err := client.GetWorkflow(ctx, &rowliftv1.WorkflowRef{Name: name})
	if err != nil {
		c.fail(w, r, what, err)
		return
	}
	c.hist.record(wf, time.Now())
	// The verify's summary and the cutover's steps in the words `rowlift
	// workflow show` prints.
	cut := wf.GetStatus().GetCutover()
	steps := make([]string, len(cut.GetSteps()))
	for i, s := range cut.GetSteps() {
		steps[i] = statustext.CutoverStep(s, cut.GetStartedAtUs())
	}
	c.reply(w, map[string]any{"workflow": protoJSON(wf), "history": c.hist.get(name), "verify_line": statustext.Verify(wf.GetStatus().GetVerify()),
		"cutover_steps": steps})
}

// act runs one action, with the CLI's RPC and request, and answers with
// the line the CLI prints.
func (c *Console) act(w http.ResponseWriter, r *http.Request) {
	if r.Header.Get(actionHeader) == "" {
		http.Error(w, "actions need the "+actionHeader+" header, which the console's own pages send", http.StatusForbidden)
		return
	}
	name, action := r.PathValue("name"), r.PathValue("action")
	ref := &rowliftv1.WorkflowRef{Name: name}
	what := action + " workflow " + name
	if action == "cancel-verify" {
		what = "cancel the verify of workflow " + name
	}
	client, ctx, done, err := c.caller(r)
	if err != nil {
		c.fail(w, r, what, err)
		return
	}
	defer done()
	var msg string
	switch action {
	case "start", "stop", "resume":
		rpc := map[string]func(context.Context, *rowliftv1.WorkflowRef, ...grpc.CallOption) (*rowliftv1.Workflow, error){
			"start": client.StartWorkflow, "stop": client.StopWorkflow, "resume": client.ResumeWorkflow,
		}[action]
		var wf *rowliftv1.Workflow
		if wf, err = rpc(ctx, ref); err == nil {
			msg = fmt.Sprintf("%s workflow %s: %s", map[string]string{"start": "started", "stop": "stopped", "resume": "resumed"}[action], name, statustext.StateLine(wf.GetStatus()))
		}
	case "verify":
		var wf *rowliftv1.Workflow
		if wf, err = client.VerifyWorkflow(ctx, &rowliftv1.VerifyRequest{Workflow: ref}); err == nil {
			msg = fmt.Sprintf("verifying workflow %s: %s", name, statustext.Verify(wf.GetStatus().GetVerify()))
		}
	case "cancel-verify":
		var resp *rowliftv1.CancelVerifyResponse
		if resp, err = client.CancelVerify(ctx, ref); err == nil {
			msg = resp.GetCancelled() + "; the streams go on without it"
			if resp.GetCancelled() == "" {
				msg = fmt.Sprintf("no verify of %s is running, nothing to cancel (last: %s)", name, statustext.Verify(resp.GetWorkflow().GetStatus().GetVerify()))
			}
		}
	case "switch", "reverse":
		rpc := client.SwitchWorkflow
		if action == "reverse" {
			rpc = client.ReverseWorkflow
		}
		req := &rowliftv1.SwitchRequest{Workflow: ref, MaxLagSeconds: switchMaxLag.Seconds(),
			Freeze: rowliftv1.FreezeMode_FREEZE_MODE_RENAME, TimeoutMs: switchTimeout.Milliseconds()}
		// The answer comes after the rollback or the hook; a closed page must not cut the cutover short.
		cctx, ccancel := context.WithTimeout(context.WithoutCancel(ctx), switchTimeout+time.Minute)
		defer ccancel()
		var resp *rowliftv1.SwitchResponse
		if resp, err = rpc(cctx, req); err == nil {
			msg = strings.Join(statustext.Switched(action, name, resp), "\n")
		}
	default:
		http.Error(w, fmt.Sprintf("unknown action %q: want start, stop, resume, verify, cancel-verify, switch or reverse", action), http.StatusNotFound)
		return
	}
	if err != nil {
		c.fail(w, r, what, err)
		return
	}
	c.log.Info("console action done", zap.String("action", action), zap.String("workflow", name), zap.String("remote", r.RemoteAddr))
	c.reply(w, map[string]any{"message": msg})
}

// errorBody is a failed call as the page shows it.
type errorBody struct {
	// Error is the CLI's line for the same failure: "WHAT: MESSAGE (Code)".
	Error string `json:"error"`
	Code  string `json:"code"`
}

// fail answers with the status of a failed Control call, as the CLI words it.
func (c *Console) fail(w http.ResponseWriter, r *http.Request, what string, err error) {
	st := status.Convert(err)
	body := errorBody{Error: fmt.Sprintf("%s: %s (%s)", what, st.Message(), st.Code()), Code: st.Code().String()}
	if st.Code() != codes.Unauthenticated && st.Code() != codes.PermissionDenied && st.Code() != codes.NotFound {
		c.log.Warn("console call failed", zap.String("what", what), zap.String("remote", r.RemoteAddr), zap.Error(errors.New(body.Error)))
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(httpStatus(st.Code()))
	_ = json.NewEncoder(w).Encode(body) // the client went away
}

// httpStatus maps a gRPC code to the HTTP status a browser's fetch sees.
func httpStatus(code codes.Code) int {
	switch code {
	case codes.Unauthenticated:
		return http.StatusUnauthorized
	case codes.PermissionDenied:
		return http.StatusForbidden
	case codes.NotFound:
		return http.StatusNotFound
	case codes.InvalidArgument:
		return http.StatusBadRequest
	case codes.FailedPrecondition, codes.Aborted, codes.AlreadyExists:
		return http.StatusConflict
	case codes.Unavailable:
		return http.StatusServiceUnavailable
	case codes.DeadlineExceeded:
		return http.StatusGatewayTimeout
	}
	return http.StatusInternalServerError
}

func (c *Console) reply(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	if err := json.NewEncoder(w).Encode(v); err != nil {
		c.log.Debug("console reply not sent", zap.Error(err))
	}
}

// protoJSON is m as the API's JSON mapping, for embedding in a reply.
func protoJSON(m proto.Message) json.RawMessage {
	b, err := protojson.Marshal(m)
	if err != nil {
		// A message the server built always marshals.
		panic(fmt.Sprintf("console: marshal %T: %v", m, err))
	}
	return b
}
