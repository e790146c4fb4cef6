package deploy

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/api/types"
	"sigs.k8s.io/kustomize/kyaml/filesys"

	"github.com/rowlift/rowlift/internal/testbin"
)

// rowliftBin is the binary built from cmd/rowlift by TestMain.
var rowliftBin string

func TestMain(m *testing.M) { testbin.Main(m, &rowliftBin, "../cmd/rowlift") }

// The kustomizations under test.
const (
	baseDir    = "kubernetes/base"
	overlayDir = "kubernetes/overlays/example-move"
)

// flagLine is a flag in `rowlift <command> --help` (the flag package's PrintDefaults).
var flagLine = regexp.MustCompile(`^  -([a-z0-9-]+)`)

// helpFlags runs the built binary's `<sub> --help` and returns the flags it
// lists, as a user would see them; false when the binary has no such
// subcommand (it then exits with an error).
func helpFlags(sub string) (map[string]bool, bool) {
	out, err := exec.Command(rowliftBin, sub, "--help").CombinedOutput()
	if err != nil {
		return nil, false
	}
	flags := map[string]bool{}
	for line := range strings.Lines(string(out)) {
		if m := flagLine.FindStringSubmatch(line); m != nil {
			flags[m[1]] = true
		}
	}
	return flags, true
}

// build runs `kustomize build dir` in process and decodes the result strictly.
func build(t *testing.T, dir string) *objects {
	t.Helper()
	o, err := decode([]byte(buildYAML(t, dir)))
	require.NoError(t, err, "kustomize build %s", dir)
	return o
}

// decodeFiles strictly decodes every YAML file of dir but its kustomization,
// so a mistake kustomize would carry through (or drop) fails here first.
func decodeFiles(t *testing.T, dir string) {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(dir, "*.yaml"))
	require.NoError(t, err)
	require.NotEmpty(t, files)
	for _, f := range files {
		if filepath.Base(f) == "kustomization.yaml" {
			continue
		}
		data, err := os.ReadFile(f)
		require.NoError(t, err)
		_, err = decode(data)
		require.NoError(t, err, f)
	}
}

// operatorSecrets reads dir's operator-secrets.yaml, the one list of the
// Secrets the operator creates for that kustomization.
func operatorSecrets(t *testing.T, dir string) []*corev1.Secret {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(dir, "operator-secrets.yaml"))
	require.NoError(t, err)
	o, err := decode(data)
	require.NoError(t, err)
	require.NotEmpty(t, o.secrets)
	return o.secrets
}

// overlayImage is the image an overlay's `images:` gives the base's image.
func overlayImage(t *testing.T, dir, base string) string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(dir, "kustomization.yaml"))
	require.NoError(t, err)
	var k types.Kustomization
	require.NoError(t, k.Unmarshal(data))
	for _, img := range k.Images {
		if img.Name == base {
			return img.NewName + ":" + img.NewTag
		}
	}
	t.Fatalf("%s sets no image for %q", dir, base)
	return ""
}

// worldOf is what the manifests of dir are checked against.
func worldOf(t *testing.T, dir, image string) world {
	t.Helper()
	df := parseDockerfile(t, dockerfilePath)
	return world{
		bin:     binary{path: df.binary, flags: helpFlags},
		image:   image,
		secrets: operatorSecrets(t, dir),
	}
}

// baseImage is the image name the base's containers use, which overlays
// replace with their registry's (the image deploy/Dockerfile builds).
const baseImage = "rowlift"

// requireNone fails the test with one problem per line.
func requireNone(t *testing.T, p problems) {
	t.Helper()
	if len(p) > 0 {
		t.Fatalf("%d problem(s):\n%s", len(p), strings.Join(p, "\n"))
	}
}

// TestBase: the base decodes strictly, file by file and as kustomize builds
// it, and passes every cross-check.
func TestBase(t *testing.T) {
	decodeFiles(t, baseDir)
	requireNone(t, check(build(t, baseDir), worldOf(t, baseDir, baseImage)))
}

// TestOverlay: the example move decodes strictly and passes every
// cross-check with its names, image and secrets.
func TestOverlay(t *testing.T) {
	decodeFiles(t, overlayDir)
	o := build(t, overlayDir)
	requireNone(t, check(o, worldOf(t, overlayDir, overlayImage(t, overlayDir, baseImage))))
	require.Len(t, o.namespaces, 1)
	for _, d := range o.deployments {
		require.Equal(t, o.namespaces[0].Name, d.Namespace, "Deployment %s", d.Name)
	}
}

// TestMistakesAreCaught feeds the same decoder and checker the base with one
// mistake each, as a typo in a commit would make it; each must fail with a
// message that names it, which the base without the mistake does not have.
func TestMistakesAreCaught(t *testing.T) {
	w := worldOf(t, baseDir, baseImage)
	raw := buildYAML(t, baseDir)
	o, err := decode([]byte(raw))
	require.NoError(t, err)
	before := check(o, w)
	for _, tc := range []struct {
		name     string
		old, new string
		want     string
	}{
		{"unknown field", "readinessProbe:", "readinesProbe:", `unknown field "spec.template.spec.containers[0].readinesProbe"`},
		{"field in the wrong case", "containerPort: 7001", "containerport: 7001", `unknown field "spec.template.spec.containers[0].ports[0].containerport"`},
		{"duplicate field", "      serviceAccountName: rowlift\n", "      serviceAccountName: rowlift\n      serviceAccountName: rowlift\n", `"serviceAccountName" already set`},
		{"wrong type", "replicas: 1", "replicas: one", "replicas"},
		{"targetPort names no container port", "targetPort: grpc", "targetPort: gprc", "Service rowlift-streamer port grpc: targetPort gprc is not a container port of Deployment rowlift-streamer"},
		{"Service selects no pod", "  selector:\n    app.kubernetes.io/component: streamer\n", "  selector:\n    app.kubernetes.io/component: streamr\n", "Service rowlift-streamer: its selector"},
		{"probe on another port", "port: 8086\n            service: readiness", "port: 8087\n            service: readiness", "readinessProbe: port 8087 is not the container port named health (8086)"},
		{"probe asks for another service", "service: readiness", "service: ready", `readinessProbe: service "ready", want "readiness"`},
		{"health port differs from the flag", "ROWLIFT_HEALTH_LISTEN: 0.0.0.0:8086", "ROWLIFT_HEALTH_LISTEN: 0.0.0.0:8088", "--health-listen=0.0.0.0:8088 does not listen on container port health (8086)"},
		{"unknown flag", "--source-dsn-file=", "--source-dns-file=", "--source-dns-file is not a flag of `rowlift streamer`"},
		{"unknown subcommand", "- streamer\n", "- streamr\n", "`rowlift streamr` is not a subcommand of the binary"},
		{"ConfigMap key no flag reads", "ROWLIFT_LOG_LEVEL: info", "ROWLIFT_LOGLEVEL: info", "sets --loglevel, which `rowlift streamer` does not define"},
		{"secret key that does not exist", "- key: source-dsn", "- key: source_dsn", `Secret rowlift-source has no key "source_dsn"`},
		{"secret that does not exist", "secretName: rowlift-source", "secretName: rowlift-src", "Secret rowlift-src is not one the operator provides (operator-secrets.yaml)"},
		{"flag file not mounted", "--source-dsn-file=/etc/rowlift/secrets/source-dsn", "--source-dsn-file=/etc/rowlift/secret/source-dsn", "--source-dsn-file=/etc/rowlift/secret/source-dsn: no volume is mounted there"},
		{"flag file not in the volume", "--source-dsn-file=/etc/rowlift/secrets/source-dsn", "--source-dsn-file=/etc/rowlift/secrets/dsn", `volume secrets mounted at /etc/rowlift/secrets provides ["source-dsn"], not "dsn"`},
		{"another binary path", `- /rowlift`, `- /usr/bin/rowlift`, "want [\"/rowlift\"] (the binary deploy/Dockerfile installs)"},
		{"another image", "image: rowlift\n", "image: rowlift:latest\n", `image "rowlift:latest", want "rowlift"`},
		{"NetworkPolicy port no pod opens", "- port: 7001\n      protocol: TCP", "- port: 7010\n      protocol: TCP", "port 7010 is not a container port of Deployment rowlift-streamer"},
		{"NetworkPolicy peer selects no pod", "    to:\n    - podSelector:\n        matchLabels:\n          app.kubernetes.io/component: streamer", "    to:\n    - podSelector:\n        matchLabels:\n          app.kubernetes.io/component: streamr", "NetworkPolicy rowlift-streamer-egress egress rule 1: its podSelector matches no Deployment's pods"},
		{"NetworkPolicy selects no pod", "      app.kubernetes.io/name: rowlift\n  policyTypes:\n  - Ingress\n  - Egress", "      app.kubernetes.io/name: rowlft\n  policyTypes:\n  - Ingress\n  - Egress", "NetworkPolicy rowlift-default-deny: its podSelector matches no Deployment's pods"},
		{"ConfigMap that is not in the build", "  name: rowlift-config\n", "  name: rowlift-confg\n", "envFrom ConfigMap rowlift-config is not in the build"},
		{"Secret as a variable", "        - name: GOMEMLIMIT\n          valueFrom:\n            resourceFieldRef:\n              resource: limits.memory",
			"        - name: ROWLIFT_SOURCE_DSN\n          valueFrom:\n            secretKeyRef:\n              name: rowlift-source\n              key: source-dsn",
			"a Secret goes in as a file"},
		{"subPath mount", "        - mountPath: /etc/rowlift/secrets\n          name: secrets\n", "        - mountPath: /etc/rowlift/secrets\n          name: secrets\n          subPath: x\n", "uses subPath"},
		{"DNS on the wrong port", "port: 53\n      protocol: UDP", "port: 54\n      protocol: UDP", "NetworkPolicies: streamer -> kube-dns port 53/UDP is refused, want allowed"},
		{"no MySQL egress", "  - ports:\n    - port: 3306\n      protocol: TCP\n", "", "NetworkPolicies: applier -> a MySQL server port 3306/TCP is refused, want allowed"},
		{"coordinator cannot reach the streamer", "      values:\n      - applier\n      - coordinator\n  policyTypes:\n  - Egress", "      values:\n      - applier\n  policyTypes:\n  - Egress",
			"NetworkPolicies: coordinator -> streamer port 7001/TCP is refused, want allowed"},
		{"metrics open to the namespace", "    - namespaceSelector:\n        matchLabels:\n          kubernetes.io/metadata.name: monitoring\n", "    - namespaceSelector: {}\n",
			"NetworkPolicies: another pod of the namespace -> coordinator port 9090/TCP is allowed, want refused"},
		{"Control API open to every pod", "      podSelector:\n        matchLabels:\n          rowlift.io/control-client: \"true\"\n", "",
			"NetworkPolicies: another pod of the namespace -> coordinator port 7000/TCP is allowed, want refused"},
		{"PodDisruptionBudget selects no pod", "      app.kubernetes.io/component: streamer\n      app.kubernetes.io/name: rowlift\n  unhealthyPodEvictionPolicy", "      app.kubernetes.io/component: streamr\n      app.kubernetes.io/name: rowlift\n  unhealthyPodEvictionPolicy",
			"Deployment rowlift-streamer: 0 PodDisruptionBudgets select its pods, want 1"},
		{"metrics port unnamed", "  - name: metrics\n    port: 9090\n    targetPort: metrics\n  selector:\n    app.kubernetes.io/component: applier", "  - name: metric\n    port: 9090\n    targetPort: metrics\n  selector:\n    app.kubernetes.io/component: applier",
			"Deployment rowlift-applier: no Service with a port named metrics selects its pods"},
		{"root allowed", "runAsNonRoot: true", "runAsNonRoot: false", "runAsNonRoot: true"},
		{"writable root filesystem", "readOnlyRootFilesystem: true", "readOnlyRootFilesystem: false", "readOnlyRootFilesystem: true"},
		{"API token mounted", "      automountServiceAccountToken: false\n", "      automountServiceAccountToken: true\n", "automountServiceAccountToken must be false"},
		{"no memory limit", "          limits:\n            memory: 1Gi\n", "", "limit memory"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			require.True(t, strings.Contains(raw, tc.old), "the mutation's text %q is not in the build", tc.old)
			o, err := decode([]byte(strings.Replace(raw, tc.old, tc.new, 1)))
			if err != nil {
				require.ErrorContains(t, err, tc.want)
				return
			}
			var found []string
			for _, p := range check(o, w) {
				if !slices.Contains(before, p) {
					found = append(found, p)
				}
			}
			require.NotEmpty(t, found, "the mistake passed")
			require.Contains(t, strings.Join(found, "\n"), tc.want)
		})
	}
}

// buildYAML is kustomize's output for dir, as text to mutate.
func buildYAML(t *testing.T, dir string) string {
	t.Helper()
	resmap, err := krusty.MakeKustomizer(krusty.MakeDefaultOptions()).Run(filesys.MakeFsOnDisk(), dir)
	require.NoError(t, err, "kustomize build %s", dir)
	out, err := resmap.AsYaml()
	require.NoError(t, err)
	return string(out)
}

// TestSecretsStayOut: a Secret added to the build (which would overwrite the
// operator's on apply) is refused.
func TestSecretsStayOut(t *testing.T) {
	raw := buildYAML(t, baseDir)
	data, err := os.ReadFile(filepath.Join(baseDir, "operator-secrets.yaml"))
	require.NoError(t, err)
	o, err := decode([]byte(raw + "---\n" + string(data)))
	require.NoError(t, err)
	require.Contains(t, strings.Join(check(o, worldOf(t, baseDir, baseImage)), "\n"), "Secrets are the operator's")
}
