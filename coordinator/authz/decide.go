// Package authz decides who may call what on the coordinator's Control API.
// A caller proves who it is with a bearer token (--auth-token-file) or a
// verified client certificate whose name is mapped to a role
// (--auth-admin-identity, --auth-read-identity); the read role may look
// (get, list, watch), the admin role may do everything. The decision is pure
// (Decide); the interceptors only gather what the request carries.
package authz

import (
	"crypto/subtle"
	"fmt"
	"strings"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	rowliftv1 "github.com/rowlift/rowlift/proto/rowlift/v1"
)

// Role is what a caller may do; each role may do what the ones below it may.
type Role int

const (
	// NoRole may call nothing but the open services (health, reflection).
	NoRole Role = iota
	// Read may show, list and watch workflows.
	Read
	// Admin may do everything.
	Admin
)

func (r Role) String() string {
	switch r {
	case Read:
		return "read"
	case Admin:
		return "admin"
	}
	return "no"
}

// controlRoles is the role each Control method needs. A method missing here
// is refused to everyone (and fails TestEveryControlMethodHasARole).
var controlRoles = map[string]Role{
	rowliftv1.Control_GetWorkflow_FullMethodName:      Read,
	rowliftv1.Control_ListWorkflows_FullMethodName:    Read,
	rowliftv1.Control_WatchWorkflow_FullMethodName:    Read,
	rowliftv1.Control_CreateWorkflow_FullMethodName:   Admin,
	rowliftv1.Control_StartWorkflow_FullMethodName:    Admin,
	rowliftv1.Control_StopWorkflow_FullMethodName:     Admin,
	rowliftv1.Control_ResumeWorkflow_FullMethodName:   Admin,
	rowliftv1.Control_RewindWorkflow_FullMethodName:   Admin,
	rowliftv1.Control_DeleteWorkflow_FullMethodName:   Admin,
	rowliftv1.Control_VerifyWorkflow_FullMethodName:   Admin,
	rowliftv1.Control_CancelVerify_FullMethodName:     Admin,
	rowliftv1.Control_SwitchWorkflow_FullMethodName:   Admin,
	rowliftv1.Control_ReverseWorkflow_FullMethodName:  Admin,
	rowliftv1.Control_CompleteWorkflow_FullMethodName: Admin,
	rowliftv1.Control_CancelWorkflow_FullMethodName:   Admin,
}

// openServices answer anyone: kubelet probes and grpcurl carry no credentials.
var openServices = []string{"/grpc.health.v1.Health/", "/grpc.reflection.v1.ServerReflection/", "/grpc.reflection.v1alpha.ServerReflection/"}

// Token is one line of the token file: a secret and the role it grants.
type Token struct {
	Role   Role
	Secret []byte
}

// Caller is what a request carries to prove who sent it.
type Caller struct {
	// Token is the bearer token of the authorization header; "" when none.
	Token string
	// Names are the common name and DNS names of the client certificate, when
	// the TLS handshake verified one.
	Names []string
}

// Policy is the configured credentials.
type Policy struct {
	Tokens []Token
	// Identities maps a certificate name (CN or DNS SAN) to its role.
	Identities map[string]Role
}

// Decide returns nil when caller may call method, else the status to answer
// with: Unauthenticated when it is not known who calls, PermissionDenied when
// the caller's role is too low. Messages never hold a token.
func Decide(p Policy, method string, caller Caller) error {
	need, ok := controlRoles[method]
	if !ok {
		for _, open := range openServices {
			if strings.HasPrefix(method, open) {
				return nil
			}
		}
		return status.Errorf(codes.PermissionDenied, "%s has no role in the coordinator's authorization table: nobody may call it", method)
	}
	short := method[strings.LastIndex(method, "/")+1:]
	role, who := NoRole, ""
	if caller.Token != "" {
		r, ok := lookup(p.Tokens, caller.Token)
		if !ok {
			return status.Errorf(codes.Unauthenticated, "%s: the bearer token is not one the coordinator accepts: "+
				"check the client's --token-file against the coordinator's --auth-token-file", short)
		}
		role, who = r, "its token has the "+r.String()+" role"
	}
	for _, name := range caller.Names {
		if r := p.Identities[name]; r > role {
			role, who = r, fmt.Sprintf("its client certificate %s has the %s role", name, r)
		}
	}
	if role == NoRole {
		return status.Error(codes.Unauthenticated, short+" needs credentials: "+wanted(p, caller))
	}
	if role < need {
		return status.Errorf(codes.PermissionDenied, "%s needs the %s role, and this caller has the %s role (%s): "+
			"use credentials with the %s role", short, need, role, who, need)
	}
	return nil
}

// wanted says what a caller with no role must send.
func wanted(p Policy, caller Caller) string {
	var ways []string
	if len(p.Tokens) > 0 {
		ways = append(ways, "a bearer token from the coordinator's --auth-token-file (rowlift workflow --token-file FILE)")
	}
	if len(p.Identities) > 0 {
		cert := "a client certificate whose common name or DNS name the coordinator maps with --auth-admin-identity or --auth-read-identity"
		if len(caller.Names) > 0 {
			cert += fmt.Sprintf(" (this one's names, %s, are not mapped)", strings.Join(caller.Names, ", "))
		}
		ways = append(ways, cert)
	}
	return "send " + strings.Join(ways, ", or ")
}

// lookup finds the role of secret, comparing in constant time against every
// token so the time taken says nothing about how close a guess was.
func lookup(tokens []Token, secret string) (Role, bool) {
	found := NoRole
	for _, t := range tokens {
		if subtle.ConstantTimeCompare(t.Secret, []byte(secret)) == 1 {
			found = t.Role
		}
	}
	return found, found != NoRole
}
