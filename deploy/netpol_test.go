package deploy

import (
	"fmt"
	"testing"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/stretchr/testify/require"
)

// endpoint is one end of a connection, as NetworkPolicies see it.
type endpoint struct {
	name string
	// local: a pod in the namespace the policies are in, so they apply to it.
	local bool
	// external: an address outside the cluster (a MySQL server), which only
	// ipBlock peers (taken to cover it: the checks name no addresses) and
	// rules without peers match.
	external bool
	ns, pod  map[string]string
}

// port is a destination port: its number and protocol, and its container
// port name, which named ports in policies refer to.
type port struct {
	number   int32
	name     string
	protocol corev1.Protocol
}

func (p port) String() string { return fmt.Sprintf("%d/%s", p.number, p.protocol) }

// allowed says whether the policies let from open a connection to port on to:
// both from's egress and to's ingress must allow it (a pod no policy of a
// direction selects is open in that direction), as Kubernetes defines it.
func allowed(policies []*networkingv1.NetworkPolicy, from, to endpoint, p port) bool {
	return allows(policies, from, networkingv1.PolicyTypeEgress, to, p) && allows(policies, to, networkingv1.PolicyTypeIngress, from, p)
}

// allows evaluates one direction for the pod self, with peer at the other end.
func allows(policies []*networkingv1.NetworkPolicy, self endpoint, dir networkingv1.PolicyType, peer endpoint, p port) bool {
	if !self.local {
		return true
	}
	isolated := false
	for _, np := range policies {
		if !hasType(np, dir) || !selects(&np.Spec.PodSelector, self.pod) {
			continue
		}
		isolated = true
		if dir == networkingv1.PolicyTypeIngress {
			for _, r := range np.Spec.Ingress {
				if peersMatch(r.From, peer) && portsMatch(r.Ports, p) {
					return true
				}
			}
		} else {
			for _, r := range np.Spec.Egress {
				if peersMatch(r.To, peer) && portsMatch(r.Ports, p) {
					return true
				}
			}
		}
	}
	return !isolated
}

// hasType: policyTypes, or when empty Ingress always and Egress when there are egress rules.
func hasType(np *networkingv1.NetworkPolicy, dir networkingv1.PolicyType) bool {
	if len(np.Spec.PolicyTypes) == 0 {
		return dir == networkingv1.PolicyTypeIngress || len(np.Spec.Egress) > 0
	}
	for _, t := range np.Spec.PolicyTypes {
		if t == dir {
			return true
		}
	}
	return false
}

// peersMatch: no peers match everything; otherwise one peer must match.
func peersMatch(peers []networkingv1.NetworkPolicyPeer, e endpoint) bool {
	if len(peers) == 0 {
		return true
	}
	for _, peer := range peers {
		if peer.IPBlock != nil {
			if e.external {
				return true
			}
			continue
		}
		if e.external {
			continue
		}
		nsOK := e.local
		if peer.NamespaceSelector != nil {
			nsOK = selects(peer.NamespaceSelector, e.ns)
		}
		if nsOK && (peer.PodSelector == nil || selects(peer.PodSelector, e.pod)) {
			return true
		}
	}
	return false
}

// portsMatch: no ports match every port; otherwise one must (by number or by
// the destination's port name, and protocol, TCP when unset).
func portsMatch(ports []networkingv1.NetworkPolicyPort, p port) bool {
	if len(ports) == 0 {
		return true
	}
	for _, pp := range ports {
		proto := corev1.ProtocolTCP
		if pp.Protocol != nil {
			proto = *pp.Protocol
		}
		if proto != p.protocol {
			continue
		}
		switch {
		case pp.Port == nil:
			return true
		case pp.Port.Type == intstr.Int && pp.Port.IntVal == p.number:
			return true
		case pp.Port.Type == intstr.String && p.name != "" && pp.Port.StrVal == p.name:
			return true
		}
	}
	return false
}

// selects is a label selector as policies read it: empty selects everything.
func selects(sel *metav1.LabelSelector, set map[string]string) bool {
	s, err := metav1.LabelSelectorAsSelector(sel)
	return err == nil && s.Matches(labels.Set(set))
}

// hop is a connection the manifests must allow, or must refuse.
type hop struct {
	from, to endpoint
	port     port
	allowed  bool
}

// rowliftHops are the connections that make rowlift work (allowed) and a
// sample of those that nothing needs (refused), between the pods of a build
// and a client, Prometheus, DNS, a MySQL server and an unrelated pod.
func rowliftHops(o *objects) ([]hop, error) {
	pods := map[string]endpoint{}
	portsOf := map[string]map[string]int32{}
	for _, d := range o.deployments {
		for _, c := range d.Spec.Template.Spec.Containers {
			if len(c.Args) == 0 {
				continue
			}
			role := c.Args[0]
			pods[role] = endpoint{name: role, local: true, ns: nsLabels(d.Namespace), pod: d.Spec.Template.Labels}
			portsOf[role] = map[string]int32{}
			for _, cp := range c.Ports {
				portsOf[role][cp.Name] = cp.ContainerPort
			}
		}
	}
	for _, role := range []string{"streamer", "applier", "coordinator"} {
		if _, ok := pods[role]; !ok {
			return nil, fmt.Errorf("no Deployment runs `rowlift %s`", role)
		}
	}
	named := func(role, name string) port {
		return port{number: portsOf[role][name], name: name, protocol: corev1.ProtocolTCP}
	}
	ns := pods["streamer"].ns
	client := endpoint{name: "a control client", local: true, ns: ns, pod: map[string]string{"rowlift.io/control-client": "true"}}
	other := endpoint{name: "another pod of the namespace", local: true, ns: ns, pod: map[string]string{"app": "other"}}
	prometheus := endpoint{name: "Prometheus", ns: nsLabels("monitoring"), pod: map[string]string{"app.kubernetes.io/name": "prometheus"}}
	dns := endpoint{name: "kube-dns", ns: nsLabels("kube-system"), pod: map[string]string{"k8s-app": "kube-dns"}}
	mysql := endpoint{name: "a MySQL server", external: true}
	web := endpoint{name: "an outside web server", external: true}
	hops := []hop{
		{pods["applier"], pods["streamer"], named("streamer", "grpc"), true},
		{pods["coordinator"], pods["streamer"], named("streamer", "grpc"), true},
		{client, pods["coordinator"], named("coordinator", "grpc"), true},
		{other, pods["coordinator"], named("coordinator", "grpc"), false},
		{other, pods["streamer"], named("streamer", "grpc"), false},
		{client, pods["streamer"], named("streamer", "grpc"), false},
		{pods["applier"], pods["coordinator"], named("coordinator", "grpc"), false},
		{pods["streamer"], pods["coordinator"], named("coordinator", "grpc"), false},
	}
	for _, role := range []string{"streamer", "applier", "coordinator"} {
		hops = append(hops,
			hop{prometheus, pods[role], named(role, "metrics"), true},
			hop{other, pods[role], named(role, "metrics"), false},
			hop{pods[role], dns, port{number: 53, protocol: corev1.ProtocolUDP}, true},
			hop{pods[role], dns, port{number: 53, protocol: corev1.ProtocolTCP}, true},
			hop{pods[role], mysql, port{number: 3306, protocol: corev1.ProtocolTCP}, true},
			hop{pods[role], web, port{number: 443, protocol: corev1.ProtocolTCP}, false},
		)
	}
	return hops, nil
}

// nsLabels are the labels Kubernetes puts on a namespace ("" is default).
func nsLabels(name string) map[string]string {
	if name == "" {
		name = "default"
	}
	return map[string]string{"kubernetes.io/metadata.name": name}
}

// checkHops: the NetworkPolicies allow exactly the rowlift hops sampled.
func checkHops(p *problems, o *objects) {
	hops, err := rowliftHops(o)
	if err != nil {
		p.addf("%v", err)
		return
	}
	for _, h := range hops {
		if got := allowed(o.policies, h.from, h.to, h.port); got != h.allowed {
			verdict := map[bool]string{true: "allowed", false: "refused"}
			p.addf("NetworkPolicies: %s -> %s port %s is %s, want %s", h.from.name, h.to.name, h.port, verdict[got], verdict[h.allowed])
		}
	}
}

// TestAllowed runs the policy evaluator over every rule it knows, each way a
// connection can be allowed or refused.
func TestAllowed(t *testing.T) {
	app := func(v string) map[string]string { return map[string]string{"app": v} }
	sel := func(m map[string]string) *metav1.LabelSelector { return &metav1.LabelSelector{MatchLabels: m} }
	tcp, udp := corev1.ProtocolTCP, corev1.ProtocolUDP
	num := func(n int32) *intstr.IntOrString { v := intstr.FromInt32(n); return &v }
	name := func(n string) *intstr.IntOrString { v := intstr.FromString(n); return &v }
	policy := func(pod map[string]string, types []networkingv1.PolicyType, in []networkingv1.NetworkPolicyIngressRule, out []networkingv1.NetworkPolicyEgressRule) *networkingv1.NetworkPolicy {
		return &networkingv1.NetworkPolicy{Spec: networkingv1.NetworkPolicySpec{PodSelector: *sel(pod), PolicyTypes: types, Ingress: in, Egress: out}}
	}
	ingress, egress := []networkingv1.PolicyType{networkingv1.PolicyTypeIngress}, []networkingv1.PolicyType{networkingv1.PolicyTypeEgress}
	a := endpoint{name: "a", local: true, ns: nsLabels("x"), pod: app("a")}
	b := endpoint{name: "b", local: true, ns: nsLabels("x"), pod: app("b")}
	remote := endpoint{name: "remote", ns: nsLabels("y"), pod: app("a")}
	outside := endpoint{name: "outside", external: true}
	web := port{number: 80, name: "web", protocol: tcp}
	fromA := []networkingv1.NetworkPolicyPeer{{PodSelector: sel(app("a"))}}
	for _, tc := range []struct {
		name     string
		policies []*networkingv1.NetworkPolicy
		from, to endpoint
		port     port
		want     bool
	}{
		{"no policy: open", nil, a, b, web, true},
		{"isolated for ingress, no rule", []*networkingv1.NetworkPolicy{policy(app("b"), ingress, nil, nil)}, a, b, web, false},
		{"a policy of another pod does not isolate", []*networkingv1.NetworkPolicy{policy(app("c"), ingress, nil, nil)}, a, b, web, true},
		{"ingress from the peer, any port", []*networkingv1.NetworkPolicy{policy(app("b"), ingress,
			[]networkingv1.NetworkPolicyIngressRule{{From: fromA}}, nil)}, a, b, web, true},
		{"ingress from another peer", []*networkingv1.NetworkPolicy{policy(app("b"), ingress,
			[]networkingv1.NetworkPolicyIngressRule{{From: []networkingv1.NetworkPolicyPeer{{PodSelector: sel(app("c"))}}}}, nil)}, a, b, web, false},
		{"ingress from anyone on the port number", []*networkingv1.NetworkPolicy{policy(app("b"), ingress,
			[]networkingv1.NetworkPolicyIngressRule{{Ports: []networkingv1.NetworkPolicyPort{{Port: num(80)}}}}, nil)}, a, b, web, true},
		{"ingress on the port name", []*networkingv1.NetworkPolicy{policy(app("b"), ingress,
			[]networkingv1.NetworkPolicyIngressRule{{Ports: []networkingv1.NetworkPolicyPort{{Port: name("web")}}}}, nil)}, a, b, web, true},
		{"ingress on another port", []*networkingv1.NetworkPolicy{policy(app("b"), ingress,
			[]networkingv1.NetworkPolicyIngressRule{{Ports: []networkingv1.NetworkPolicyPort{{Port: num(81)}, {Port: name("other")}}}}, nil)}, a, b, web, false},
		{"ingress on the port over another protocol", []*networkingv1.NetworkPolicy{policy(app("b"), ingress,
			[]networkingv1.NetworkPolicyIngressRule{{Ports: []networkingv1.NetworkPolicyPort{{Port: num(80), Protocol: &udp}}}}, nil)}, a, b, web, false},
		{"a pod selector alone means this namespace", []*networkingv1.NetworkPolicy{policy(app("b"), ingress,
			[]networkingv1.NetworkPolicyIngressRule{{From: fromA}}, nil)}, remote, b, web, false},
		{"any namespace's pod", []*networkingv1.NetworkPolicy{policy(app("b"), ingress,
			[]networkingv1.NetworkPolicyIngressRule{{From: []networkingv1.NetworkPolicyPeer{{NamespaceSelector: sel(nil), PodSelector: sel(app("a"))}}}}, nil)}, remote, b, web, true},
		{"another namespace by its name", []*networkingv1.NetworkPolicy{policy(app("b"), ingress,
			[]networkingv1.NetworkPolicyIngressRule{{From: []networkingv1.NetworkPolicyPeer{{NamespaceSelector: sel(nsLabels("y"))}}}}, nil)}, remote, b, web, true},
		{"not that namespace", []*networkingv1.NetworkPolicy{policy(app("b"), ingress,
			[]networkingv1.NetworkPolicyIngressRule{{From: []networkingv1.NetworkPolicyPeer{{NamespaceSelector: sel(nsLabels("z"))}}}}, nil)}, remote, b, web, false},
		{"one allowing policy among isolating ones", []*networkingv1.NetworkPolicy{policy(app("b"), ingress, nil, nil),
			policy(app("b"), ingress, []networkingv1.NetworkPolicyIngressRule{{From: fromA}}, nil)}, a, b, web, true},
		{"isolated for egress, no rule", []*networkingv1.NetworkPolicy{policy(app("a"), egress, nil, nil)}, a, b, web, false},
		{"egress isolation does not touch ingress", []*networkingv1.NetworkPolicy{policy(app("b"), egress, nil, nil)}, a, b, web, true},
		{"egress to the peer", []*networkingv1.NetworkPolicy{policy(app("a"), egress, nil,
			[]networkingv1.NetworkPolicyEgressRule{{To: []networkingv1.NetworkPolicyPeer{{PodSelector: sel(app("b"))}}}})}, a, b, web, true},
		{"egress rules without policyTypes isolate egress", []*networkingv1.NetworkPolicy{policy(app("a"), nil, nil,
			[]networkingv1.NetworkPolicyEgressRule{{To: []networkingv1.NetworkPolicyPeer{{PodSelector: sel(app("c"))}}}})}, a, b, web, false},
		{"no policyTypes and no egress rules: ingress only", []*networkingv1.NetworkPolicy{policy(app("a"), nil, nil, nil)}, a, b, web, true},
		{"egress to outside by ipBlock", []*networkingv1.NetworkPolicy{policy(app("a"), egress, nil,
			[]networkingv1.NetworkPolicyEgressRule{{To: []networkingv1.NetworkPolicyPeer{{IPBlock: &networkingv1.IPBlock{CIDR: "0.0.0.0/0"}}}}})}, a, outside, web, true},
		{"an ipBlock matches no pod", []*networkingv1.NetworkPolicy{policy(app("a"), egress, nil,
			[]networkingv1.NetworkPolicyEgressRule{{To: []networkingv1.NetworkPolicyPeer{{IPBlock: &networkingv1.IPBlock{CIDR: "0.0.0.0/0"}}}}})}, a, b, web, false},
		{"a pod selector matches nothing outside", []*networkingv1.NetworkPolicy{policy(app("a"), egress, nil,
			[]networkingv1.NetworkPolicyEgressRule{{To: []networkingv1.NetworkPolicyPeer{{NamespaceSelector: sel(nil)}}}})}, a, outside, web, false},
		{"egress on a port to anywhere", []*networkingv1.NetworkPolicy{policy(app("a"), egress, nil,
			[]networkingv1.NetworkPolicyEgressRule{{Ports: []networkingv1.NetworkPolicyPort{{Port: num(80)}}}})}, a, outside, web, true},
		{"both ends must allow", []*networkingv1.NetworkPolicy{
			policy(app("a"), egress, nil, []networkingv1.NetworkPolicyEgressRule{{}}),
			policy(app("b"), ingress, []networkingv1.NetworkPolicyIngressRule{{From: []networkingv1.NetworkPolicyPeer{{PodSelector: sel(app("c"))}}}}, nil)}, a, b, web, false},
		{"a port rule without a port is every port of its protocol", []*networkingv1.NetworkPolicy{policy(app("b"), ingress,
			[]networkingv1.NetworkPolicyIngressRule{{Ports: []networkingv1.NetworkPolicyPort{{Protocol: &tcp}}}}, nil)}, a, b, web, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			require.Equal(t, tc.want, allowed(tc.policies, tc.from, tc.to, tc.port))
		})
	}
}
