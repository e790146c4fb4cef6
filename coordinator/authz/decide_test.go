package authz

import (
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	rowliftv1 "github.com/rowlift/rowlift/proto/rowlift/v1"
)

// methodTable is the role each Control method needs, written out apart from
// controlRoles so a change to either shows here.
var methodTable = map[string]Role{
	"GetWorkflow":      Read,
	"ListWorkflows":    Read,
	"WatchWorkflow":    Read,
	"CreateWorkflow":   Admin,
	"StartWorkflow":    Admin,
	"StopWorkflow":     Admin,
	"ResumeWorkflow":   Admin,
	"RewindWorkflow":   Admin,
	"DeleteWorkflow":   Admin,
	"VerifyWorkflow":   Admin,
	"CancelVerify":     Admin,
	"SwitchWorkflow":   Admin,
	"ReverseWorkflow":  Admin,
	"CompleteWorkflow": Admin,
	"CancelWorkflow":   Admin,
}

// controlMethods are the full names of every method the Control service has.
func controlMethods() []string {
	var out []string
	d := rowliftv1.Control_ServiceDesc
	for _, m := range d.Methods {
		out = append(out, "/"+d.ServiceName+"/"+m.MethodName)
	}
	for _, s := range d.Streams {
		out = append(out, "/"+d.ServiceName+"/"+s.StreamName)
	}
	return out
}

// TestEveryControlMethodHasARole: a new RPC fails here until it is given a
// role in controlRoles and in methodTable.
func TestEveryControlMethodHasARole(t *testing.T) {
	methods := controlMethods()
	for _, m := range methods {
		short := m[len("/rowlift.v1.Control/"):]
		want, ok := methodTable[short]
		require.True(t, ok, "%s is not in this test's methodTable", m)
		require.Equal(t, want, controlRoles[m], "%s", m)
	}
	require.Len(t, controlRoles, len(methods), "controlRoles names a method the service does not have")
	require.Len(t, methodTable, len(methods), "methodTable names a method the service does not have")
}

const (
	adminToken = "admin-token-0123456789"
	readToken  = "read-token-0123456789"
)

var policy = Policy{
	Tokens:     []Token{{Admin, []byte(adminToken)}, {Read, []byte(readToken)}},
	Identities: map[string]Role{"ops.example.com": Admin, "dashboard": Read},
}

// TestDecide runs every Control method against every kind of caller: the
// caller's role (or why it has none) and the method's role decide the answer.
func TestDecide(t *testing.T) {
	callers := []struct {
		name   string
		caller Caller
		role   Role       // the caller's role when it is known who calls
		code   codes.Code // when it is not: the answer to every Control call
		msg    string     // what that answer says
	}{
		{"nothing", Caller{}, NoRole, codes.Unauthenticated, "needs credentials: send a bearer token from the coordinator's --auth-token-file " +
			"(rowlift workflow --token-file FILE), or a client certificate whose common name or DNS name the coordinator maps with " +
			"--auth-admin-identity or --auth-read-identity"},
		{"wrong token", Caller{Token: "guessed-0123456789"}, NoRole, codes.Unauthenticated,
			"the bearer token is not one the coordinator accepts: check the client's --token-file against the coordinator's --auth-token-file"},
		{"wrong token, admin certificate", Caller{Token: "guessed-0123456789", Names: []string{"ops.example.com"}}, NoRole, codes.Unauthenticated,
			"the bearer token is not one the coordinator accepts"},
		{"unmapped certificate", Caller{Names: []string{"laptop", "laptop.example.com"}}, NoRole, codes.Unauthenticated,
			"(this one's names, laptop, laptop.example.com, are not mapped)"},
		{"read token", Caller{Token: readToken}, Read, codes.OK, "its token has the read role"},
		{"admin token", Caller{Token: adminToken}, Admin, codes.OK, ""},
		{"read certificate", Caller{Names: []string{"dashboard"}}, Read, codes.OK, "its client certificate dashboard has the read role"},
		{"admin certificate by DNS name", Caller{Names: []string{"ops", "ops.example.com"}}, Admin, codes.OK, ""},
		{"read token, admin certificate", Caller{Token: readToken, Names: []string{"ops.example.com"}}, Admin, codes.OK, ""},
		{"admin token, read certificate", Caller{Token: adminToken, Names: []string{"dashboard"}}, Admin, codes.OK, ""},
		{"read token, unmapped certificate", Caller{Token: readToken, Names: []string{"laptop"}}, Read, codes.OK, "its token has the read role"},
	}
	for _, c := range callers {
		for _, m := range controlMethods() {
			short := m[len("/rowlift.v1.Control/"):]
			t.Run(c.name+"/"+short, func(t *testing.T) {
				err := Decide(policy, m, c.caller)
				need := methodTable[short]
				switch {
				case c.role == NoRole:
					require.Equal(t, c.code, status.Code(err), "%v", err)
					require.True(t, strings.HasPrefix(status.Convert(err).Message(), short), "the answer names the method")
					require.Contains(t, status.Convert(err).Message(), c.msg)
				case c.role >= need:
					require.NoError(t, err)
				default:
					require.Equal(t, codes.PermissionDenied, status.Code(err), "%v", err)
					require.Equal(t, fmt.Sprintf("%s needs the admin role, and this caller has the read role (%s): use credentials with the admin role",
						short, c.msg), status.Convert(err).Message())
				}
			})
		}
	}
}

// TestDecideOpen: health and reflection answer anyone; a method of no known
// service answers no one.
func TestDecideOpen(t *testing.T) {
	for _, m := range []string{"/grpc.health.v1.Health/Check", "/grpc.health.v1.Health/Watch",
		"/grpc.reflection.v1.ServerReflection/ServerReflectionInfo", "/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo"} {
		require.NoError(t, Decide(policy, m, Caller{}), m)
	}
	err := Decide(policy, "/rowlift.v1.Control/NewThing", Caller{Token: adminToken})
	require.Equal(t, codes.PermissionDenied, status.Code(err))
	require.Equal(t, "/rowlift.v1.Control/NewThing has no role in the coordinator's authorization table: nobody may call it", status.Convert(err).Message())
	err = Decide(policy, "/rowlift.v1.Streamer/Stream", Caller{Token: adminToken})
	require.Equal(t, codes.PermissionDenied, status.Code(err))
}

// TestDecideOneKind: the Unauthenticated message offers only the kinds of
// credentials the coordinator is configured with.
func TestDecideOneKind(t *testing.T) {
	err := Decide(Policy{Tokens: policy.Tokens}, rowliftv1.Control_ListWorkflows_FullMethodName, Caller{Names: []string{"client"}})
	require.Equal(t, codes.Unauthenticated, status.Code(err))
	require.Equal(t, "ListWorkflows needs credentials: send a bearer token from the coordinator's --auth-token-file (rowlift workflow --token-file FILE)",
		status.Convert(err).Message())
	err = Decide(Policy{Identities: policy.Identities}, rowliftv1.Control_ListWorkflows_FullMethodName, Caller{Token: readToken})
	require.Equal(t, codes.Unauthenticated, status.Code(err), "no token file: every token is wrong")
}
