package deploy

import (
	"fmt"
	"maps"
	"net"
	"path"
	"slices"
	"strconv"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// Names the manifests and rowlift agree on.
const (
	// readinessService and livenessService are the grpc.health.v1 service
	// names rowlift's --health-listen answers (internal/probe).
	readinessService = "readiness"
	livenessService  = ""
	// envPrefix starts the environment variable of every rowlift flag.
	envPrefix = "ROWLIFT_"
)

// listenPorts maps a listen flag to the name of the container port it opens.
var listenPorts = map[string]string{"listen": "grpc", "metrics-listen": "metrics", "health-listen": "health"}

// binary is what the image holds: where the rowlift binary is, and the flags
// each of its subcommands defines (false: no such subcommand).
type binary struct {
	path  string
	flags func(sub string) (map[string]bool, bool)
}

// world is what a build is checked against: the binary, the image every
// container must run, and the Secrets the operator provides.
type world struct {
	bin     binary
	image   string
	secrets []*corev1.Secret
}

// problems collects every mistake of a build, so one run names them all.
type problems []string

func (p *problems) addf(format string, args ...any) { *p = append(*p, fmt.Sprintf(format, args...)) }

// check cross-checks a build: Services, budgets and policies select pods that
// exist, ports and probes name container ports, every key a pod reads exists,
// every file a flag names is mounted, every container runs the image's binary
// with a subcommand and flags that binary defines, and the NetworkPolicies
// allow the rowlift hops and refuse the others sampled (rowliftHops).
func check(o *objects, w world) problems {
	var p problems
	if len(o.secrets) > 0 {
		p.addf("the build holds Secret %s: Secrets are the operator's (operator-secrets.yaml), and applying the build would overwrite them", o.secrets[0].Name)
	}
	for _, d := range o.deployments {
		checkDeployment(&p, o, w, d)
	}
	for _, s := range o.services {
		checkService(&p, o, s)
	}
	for _, b := range o.budgets {
		if len(selected(o, b.Spec.Selector)) == 0 {
			p.addf("PodDisruptionBudget %s: its selector matches no Deployment's pods", b.Name)
		}
	}
	for _, np := range o.policies {
		checkPolicy(&p, o, np)
	}
	checkHops(&p, o)
	return p
}

func checkDeployment(p *problems, o *objects, w world, d *appsv1.Deployment) {
	where := "Deployment " + d.Name
	pod := d.Spec.Template.Spec
	if !matches(d.Spec.Selector, d.Spec.Template.Labels) {
		p.addf("%s: its selector does not match its own pod labels", where)
	}
	if pod.AutomountServiceAccountToken == nil || *pod.AutomountServiceAccountToken {
		p.addf("%s: automountServiceAccountToken must be false: rowlift never calls the Kubernetes API", where)
	}
	if !slices.ContainsFunc(o.serviceAccounts, func(sa *corev1.ServiceAccount) bool { return sa.Name == pod.ServiceAccountName }) {
		p.addf("%s: serviceAccountName %q is not in the build", where, pod.ServiceAccountName)
	}
	if sc := pod.SecurityContext; sc == nil || sc.RunAsNonRoot == nil || !*sc.RunAsNonRoot ||
		sc.SeccompProfile == nil || sc.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault {
		p.addf("%s: the pod securityContext must set runAsNonRoot: true and seccompProfile RuntimeDefault", where)
	}
	budgets, scraped := 0, false
	for _, b := range o.budgets {
		if matches(b.Spec.Selector, d.Spec.Template.Labels) {
			budgets++
		}
	}
	for _, s := range o.services {
		if matches(&metav1.LabelSelector{MatchLabels: s.Spec.Selector}, d.Spec.Template.Labels) {
			scraped = scraped || slices.ContainsFunc(s.Spec.Ports, func(sp corev1.ServicePort) bool { return sp.Name == "metrics" })
		}
	}
	if budgets != 1 {
		p.addf("%s: %d PodDisruptionBudgets select its pods, want 1", where, budgets)
	}
	if !scraped {
		p.addf("%s: no Service with a port named metrics selects its pods, so no ServiceMonitor finds them", where)
	}
	files := mountedFiles(p, o, w, where, pod)
	for _, c := range pod.Containers {
		checkContainer(p, o, w, where+" container "+c.Name, c, files)
	}
}

// mountedFiles returns, per volume name, the files it provides (relative
// paths), after checking each Secret or ConfigMap key it reads exists.
func mountedFiles(p *problems, o *objects, w world, where string, pod corev1.PodSpec) map[string][]string {
	files := map[string][]string{}
	for _, v := range pod.Volumes {
		var refs []keyRef
		switch {
		case v.Secret != nil:
			refs = append(refs, keyRef{"Secret", v.Secret.SecretName, v.Secret.Items})
		case v.ConfigMap != nil:
			refs = append(refs, keyRef{"ConfigMap", v.ConfigMap.Name, v.ConfigMap.Items})
		case v.Projected != nil:
			for _, src := range v.Projected.Sources {
				switch {
				case src.Secret != nil:
					refs = append(refs, keyRef{"Secret", src.Secret.Name, src.Secret.Items})
				case src.ConfigMap != nil:
					refs = append(refs, keyRef{"ConfigMap", src.ConfigMap.Name, src.ConfigMap.Items})
				}
			}
		}
		for _, r := range refs {
			if len(r.items) == 0 {
				p.addf("%s volume %s: list the keys of %s %s as items, so each one is checked", where, v.Name, r.kind, r.name)
			}
			for _, it := range r.items {
				checkKey(p, o, w.secrets, where+" volume "+v.Name, r.kind, r.name, it.Key)
				files[v.Name] = append(files[v.Name], it.Path)
			}
		}
	}
	return files
}

// keyRef is the keys a volume reads from one Secret or ConfigMap.
type keyRef struct {
	kind, name string
	items      []corev1.KeyToPath
}

// keysOf returns the keys of a Secret the operator provides or of a ConfigMap
// in the build, and whether there is one of that name.
func keysOf(o *objects, secrets []*corev1.Secret, kind, name string) (map[string]bool, bool) {
	keys := map[string]bool{}
	if kind == "Secret" {
		for _, s := range secrets {
			if s.Name == name {
				for k := range s.StringData {
					keys[k] = true
				}
				for k := range s.Data {
					keys[k] = true
				}
				return keys, true
			}
		}
		return nil, false
	}
	for _, cm := range o.configMaps {
		if cm.Name == name {
			for k := range cm.Data {
				keys[k] = true
			}
			return keys, true
		}
	}
	return nil, false
}

// checkKey: the Secret or ConfigMap exists and holds key.
func checkKey(p *problems, o *objects, secrets []*corev1.Secret, where, kind, name, key string) {
	keys, ok := keysOf(o, secrets, kind, name)
	switch {
	case !ok && kind == "Secret":
		p.addf("%s: Secret %s is not one the operator provides (operator-secrets.yaml)", where, name)
	case !ok:
		p.addf("%s: ConfigMap %s is not in the build", where, name)
	case !keys[key]:
		p.addf("%s: %s %s has no key %q", where, kind, name, key)
	}
}

func checkContainer(p *problems, o *objects, w world, where string, c corev1.Container, files map[string][]string) {
	if c.Image != w.image {
		p.addf("%s: image %q, want %q (the image deploy/Dockerfile builds)", where, c.Image, w.image)
	}
	if !slices.Equal(c.Command, []string{w.bin.path}) {
		p.addf("%s: command %q, want [%q] (the binary deploy/Dockerfile installs)", where, c.Command, w.bin.path)
	}
	if len(c.Args) == 0 {
		p.addf("%s: no args: the first names the rowlift role", where)
		return
	}
	role := c.Args[0]
	flags, ok := w.bin.flags(role)
	if !ok {
		p.addf("%s: `rowlift %s` is not a subcommand of the binary", where, role)
		return
	}
	settings := map[string]string{} // flag -> value, from the environment, then the args
	for _, name := range envNames(p, o, where, c) {
		flag := strings.ReplaceAll(strings.ToLower(strings.TrimPrefix(name.env, envPrefix)), "_", "-")
		if !flags[flag] {
			p.addf("%s: %s ($%s) sets --%s, which `rowlift %s` does not define", where, name.from, name.env, flag, role)
		}
		if name.value != "" {
			settings[flag] = name.value
		}
	}
	for _, arg := range c.Args[1:] {
		flag, value, ok := strings.Cut(strings.TrimPrefix(arg, "--"), "=")
		if !strings.HasPrefix(arg, "--") || !ok {
			p.addf("%s: arg %q: write flags as --name=value, one list item per setting", where, arg)
			continue
		}
		if !flags[flag] {
			p.addf("%s: --%s is not a flag of `rowlift %s`", where, flag, role)
		}
		settings[flag] = value
		checkFile(p, where, flag, value, c, files)
	}
	ports := map[string]int32{}
	for _, cp := range c.Ports {
		ports[cp.Name] = cp.ContainerPort
	}
	for _, flag := range slices.Sorted(maps.Keys(listenPorts)) {
		portName := listenPorts[flag]
		value, set := settings[flag]
		port, open := ports[portName]
		switch {
		case set && !open:
			p.addf("%s: --%s=%s but no container port is named %s", where, flag, value, portName)
		case !set && open && flags[flag]:
			p.addf("%s: container port %s (%d) but --%s is not set", where, portName, port, flag)
		case set && open:
			if _, sport, err := net.SplitHostPort(value); err != nil || sport != strconv.Itoa(int(port)) {
				p.addf("%s: --%s=%s does not listen on container port %s (%d)", where, flag, value, portName, port)
			}
		}
	}
	checkProbe(p, where+" readinessProbe", c.ReadinessProbe, ports["health"], readinessService)
	checkProbe(p, where+" livenessProbe", c.LivenessProbe, ports["health"], livenessService)
	if sc := c.SecurityContext; sc == nil || sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation ||
		sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem || sc.Capabilities == nil || !slices.Contains(sc.Capabilities.Drop, "ALL") {
		p.addf("%s: securityContext must set allowPrivilegeEscalation: false, readOnlyRootFilesystem: true and drop ALL capabilities", where)
	}
	r := c.Resources
	if r.Requests.Cpu().IsZero() || r.Requests.Memory().IsZero() || r.Limits.Memory().IsZero() {
		p.addf("%s: resources must request cpu and memory and limit memory", where)
	}
}

// envName is one $ROWLIFT_<FLAG> a container gets, where from, and its value
// when the manifests say it.
type envName struct{ env, from, value string }

// envNames lists the container's rowlift variables, from env and from the
// ConfigMaps of envFrom (each of whose keys must then be a rowlift variable).
func envNames(p *problems, o *objects, where string, c corev1.Container) []envName {
	var names []envName
	for _, e := range c.Env {
		if strings.HasPrefix(e.Name, envPrefix) {
			names = append(names, envName{e.Name, "env", e.Value})
		}
		if ref := e.ValueFrom; ref != nil && ref.ConfigMapKeyRef != nil {
			checkKey(p, o, nil, where+" env "+e.Name, "ConfigMap", ref.ConfigMapKeyRef.Name, ref.ConfigMapKeyRef.Key)
		}
		if ref := e.ValueFrom; ref != nil && ref.SecretKeyRef != nil {
			p.addf("%s: env %s: a Secret goes in as a file (--*-file), never as a variable anyone who can read the pod's environment sees", where, e.Name)
		}
	}
	for _, src := range c.EnvFrom {
		if src.ConfigMapRef == nil {
			p.addf("%s: envFrom: only ConfigMaps (Secrets go in as files)", where)
			continue
		}
		var cm *corev1.ConfigMap
		for _, m := range o.configMaps {
			if m.Name == src.ConfigMapRef.Name {
				cm = m
			}
		}
		if cm == nil {
			p.addf("%s: envFrom ConfigMap %s is not in the build", where, src.ConfigMapRef.Name)
			continue
		}
		for _, key := range slices.Sorted(maps.Keys(cm.Data)) {
			value := cm.Data[key]
			if !strings.HasPrefix(key, envPrefix) {
				p.addf("%s: envFrom ConfigMap %s key %s: rowlift reads only %s<FLAG> variables", where, cm.Name, key, envPrefix)
				continue
			}
			names = append(names, envName{key, "ConfigMap " + cm.Name, value})
		}
	}
	return names
}

// checkFile: a flag value that is an absolute path (or NAME=/path, as
// --target-file) must be a file a volume mounts.
func checkFile(p *problems, where, flag, value string, c corev1.Container, files map[string][]string) {
	if _, after, ok := strings.Cut(value, "="); ok {
		value = after
	}
	if !strings.HasPrefix(value, "/") {
		return
	}
	for _, m := range c.VolumeMounts {
		rel, ok := strings.CutPrefix(value, strings.TrimSuffix(m.MountPath, "/")+"/")
		if !ok {
			continue
		}
		if m.SubPath != "" {
			p.addf("%s: volume mount %s uses subPath: its files would not follow a rotated Secret", where, m.Name)
		}
		if !slices.Contains(files[m.Name], path.Clean(rel)) {
			p.addf("%s: --%s=%s: volume %s mounted at %s provides %q, not %q", where, flag, value, m.Name, m.MountPath, files[m.Name], rel)
		}
		return
	}
	p.addf("%s: --%s=%s: no volume is mounted there", where, flag, value)
}

// checkProbe: a gRPC probe on the health port, asking for service.
func checkProbe(p *problems, where string, pr *corev1.Probe, healthPort int32, service string) {
	switch {
	case pr == nil:
		p.addf("%s: missing", where)
	case pr.GRPC == nil:
		p.addf("%s: must be a grpc probe on the health port (--health-listen)", where)
	case healthPort == 0 || pr.GRPC.Port != healthPort:
		p.addf("%s: port %d is not the container port named health (%d)", where, pr.GRPC.Port, healthPort)
	case ptrValue(pr.GRPC.Service) != service:
		p.addf("%s: service %q, want %q", where, ptrValue(pr.GRPC.Service), service)
	}
}

func checkService(p *problems, o *objects, s *corev1.Service) {
	where := "Service " + s.Name
	pods := selected(o, &metav1.LabelSelector{MatchLabels: s.Spec.Selector})
	if len(s.Spec.Selector) == 0 || len(pods) == 0 {
		p.addf("%s: its selector %v matches no Deployment's pods", where, s.Spec.Selector)
		return
	}
	metrics := false
	for _, sp := range s.Spec.Ports {
		metrics = metrics || sp.Name == "metrics"
		for _, d := range pods {
			if !hasPort(d, sp.TargetPort) {
				p.addf("%s port %s: targetPort %s is not a container port of Deployment %s", where, sp.Name, sp.TargetPort.String(), d.Name)
			}
		}
	}
	if !metrics {
		p.addf("%s: no port named metrics, which a ServiceMonitor selects", where)
	}
}

// checkPolicy: a NetworkPolicy selects rowlift pods, and every port it opens
// to or from rowlift pods is a container port of those pods.
func checkPolicy(p *problems, o *objects, np *networkingv1.NetworkPolicy) {
	where := "NetworkPolicy " + np.Name
	pods := selected(o, &np.Spec.PodSelector)
	if len(pods) == 0 {
		p.addf("%s: its podSelector matches no Deployment's pods", where)
		return
	}
	for i, rule := range np.Spec.Ingress {
		for _, port := range rule.Ports {
			for _, d := range pods {
				if port.Port == nil || !hasPort(d, *port.Port) {
					p.addf("%s ingress rule %d: port %v is not a container port of Deployment %s", where, i+1, portString(port.Port), d.Name)
				}
			}
		}
	}
	for i, rule := range np.Spec.Egress {
		for _, peer := range rule.To {
			if peer.PodSelector == nil || peer.NamespaceSelector != nil || peer.IPBlock != nil {
				continue // outside rowlift: DNS, MySQL servers
			}
			peers := selected(o, peer.PodSelector)
			if len(peers) == 0 {
				p.addf("%s egress rule %d: its podSelector matches no Deployment's pods", where, i+1)
			}
			for _, port := range rule.Ports {
				for _, d := range peers {
					if port.Port == nil || !hasPort(d, *port.Port) {
						p.addf("%s egress rule %d: port %v is not a container port of Deployment %s", where, i+1, portString(port.Port), d.Name)
					}
				}
			}
		}
	}
}

// selected returns the Deployments whose pods sel matches.
func selected(o *objects, sel *metav1.LabelSelector) []*appsv1.Deployment {
	var out []*appsv1.Deployment
	for _, d := range o.deployments {
		if matches(sel, d.Spec.Template.Labels) {
			out = append(out, d)
		}
	}
	return out
}

func matches(sel *metav1.LabelSelector, podLabels map[string]string) bool {
	s, err := metav1.LabelSelectorAsSelector(sel)
	return err == nil && sel != nil && !s.Empty() && s.Matches(labels.Set(podLabels))
}

// hasPort says whether a Deployment's containers have port (a name or a number).
func hasPort(d *appsv1.Deployment, port intstr.IntOrString) bool {
	for _, c := range d.Spec.Template.Spec.Containers {
		for _, cp := range c.Ports {
			if (port.Type == intstr.String && cp.Name == port.StrVal) || (port.Type == intstr.Int && cp.ContainerPort == port.IntVal) {
				return true
			}
		}
	}
	return false
}

func portString(port *intstr.IntOrString) string {
	if port == nil {
		return "(all)"
	}
	return port.String()
}

func ptrValue(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}
