package deploy

import (
	"maps"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/moby/buildkit/frontend/dockerfile/parser"
	"github.com/moby/buildkit/frontend/dockerfile/shell"
	"github.com/stretchr/testify/require"
)

const dockerfilePath = "Dockerfile"

// dockerfile is what the manifests need from the image: where its binary is.
type dockerfile struct {
	binary string
}

// stage is one FROM ... [AS name] of a Dockerfile and its instructions.
type stage struct {
	image, name  string
	instructions []*parser.Node
	// args are the stage's ARG defaults, for expanding its RUN lines.
	args map[string]string
}

// argEnv gives the shell lexer a stage's ARG defaults.
type argEnv map[string]string

func (e argEnv) Get(k string) (string, bool) {
	v, ok := e[k]
	return v, ok
}

func (e argEnv) Keys() []string { return slices.Sorted(maps.Keys(e)) }

// checkDockerfile parses a Dockerfile with BuildKit's own parser and checks
// that it builds rowlift the way production needs: a Go build stage on
// go.mod's Go version that builds static (CGO_ENABLED=0) with -trimpath and
// the version stamped, and a final stage that runs as a numeric non-root user
// and copies the built binary to the path its ENTRYPOINT runs.
func checkDockerfile(data []byte, goVersion string) (dockerfile, problems) {
	var p problems
	res, err := parser.Parse(strings.NewReader(string(data)))
	if err != nil {
		p.addf("parse: %v", err)
		return dockerfile{}, p
	}
	var stages []*stage
	for _, n := range res.AST.Children {
		if strings.EqualFold(n.Value, "from") {
			s := &stage{image: word(n, 0), args: map[string]string{}}
			if strings.EqualFold(word(n, 1), "as") {
				s.name = word(n, 2)
			}
			stages = append(stages, s)
			continue
		}
		if len(stages) == 0 {
			continue // ARG before the first FROM
		}
		s := stages[len(stages)-1]
		s.instructions = append(s.instructions, n)
		if strings.EqualFold(n.Value, "arg") {
			k, v, _ := strings.Cut(word(n, 0), "=")
			s.args[k] = v
		}
	}
	if len(stages) < 2 {
		p.addf("%d stage(s): want a build stage and a final stage, so the image holds the binary and no toolchain", len(stages))
		return dockerfile{}, p
	}
	build, final := stages[0], stages[len(stages)-1]
	if want := "golang:" + goVersion; build.image != want && !strings.HasPrefix(build.image, want+"-") {
		p.addf("build stage FROM %s: want %s, the go.mod's Go version", build.image, want)
	}
	out := checkBuild(&p, build)
	var copied string
	user := ""
	for _, n := range final.instructions {
		switch strings.ToLower(n.Value) {
		case "copy":
			if slices.Contains(n.Flags, "--from="+build.name) && word(n, 0) == out {
				copied = word(n, 1)
			}
		case "user":
			user = word(n, 0)
		}
	}
	uid, _, _ := strings.Cut(user, ":")
	if id, err := strconv.Atoi(uid); err != nil || id == 0 {
		p.addf("final stage USER %q: want a numeric non-root UID (kubelet can only verify runAsNonRoot against a number)", user)
	}
	if copied == "" {
		p.addf("final stage: no COPY --from=%s %s <path>: the image does not hold the binary the build stage made", build.name, out)
	}
	var entry []string
	for _, n := range final.instructions {
		if strings.EqualFold(n.Value, "entrypoint") && n.Attributes["json"] {
			entry = words(n)
		}
	}
	if copied != "" && !slices.Equal(entry, []string{copied}) {
		p.addf("final stage ENTRYPOINT %q: want [%q] in JSON form, the binary it copies", entry, copied)
	}
	return dockerfile{binary: copied}, p
}

// checkBuild checks the build stage's go build and returns its output path.
func checkBuild(p *problems, s *stage) string {
	lex := shell.NewLex('\\')
	for _, n := range s.instructions {
		if !strings.EqualFold(n.Value, "run") {
			continue
		}
		argv, err := lex.ProcessWords(word(n, 0), argEnv(s.args))
		if err != nil {
			p.addf("build stage RUN %q: %v", word(n, 0), err)
			continue
		}
		i := slices.Index(argv, "build")
		if i < 1 || argv[i-1] != "go" {
			continue
		}
		env, flags := argv[:i-1], argv[i+1:]
		if !slices.Contains(env, "CGO_ENABLED=0") {
			p.addf("build stage: go build without CGO_ENABLED=0: the binary would need a C library the final image does not have")
		}
		if !slices.Contains(flags, "-trimpath") {
			p.addf("build stage: go build without -trimpath: the binary would carry the build machine's paths")
		}
		if j := slices.Index(flags, "-ldflags"); j < 0 || j+1 == len(flags) || !strings.Contains(flags[j+1], "-X main.version=") {
			p.addf("build stage: go build without -ldflags \"-X main.version=...\": `rowlift version` would not say which build runs")
		}
		if j := slices.Index(flags, "-o"); j >= 0 && j+1 < len(flags) {
			return flags[j+1]
		}
		p.addf("build stage: go build without -o <path>")
		return ""
	}
	p.addf("build stage: no RUN ... go build")
	return ""
}

// word is a node's i-th argument.
func word(n *parser.Node, i int) string {
	for a := n.Next; a != nil; a = a.Next {
		if i == 0 {
			return a.Value
		}
		i--
	}
	return ""
}

func words(n *parser.Node) []string {
	var out []string
	for a := n.Next; a != nil; a = a.Next {
		out = append(out, a.Value)
	}
	return out
}

// goModVersion is the go directive of the module's go.mod.
func goModVersion(t *testing.T) string {
	t.Helper()
	data, err := os.ReadFile("../go.mod")
	require.NoError(t, err)
	m := regexp.MustCompile(`(?m)^go (\S+)$`).FindSubmatch(data)
	require.NotNil(t, m, "go.mod has no go directive")
	return string(m[1])
}

// parseDockerfile checks the Dockerfile at path and returns what it builds.
func parseDockerfile(t *testing.T, path string) dockerfile {
	t.Helper()
	data, err := os.ReadFile(path)
	require.NoError(t, err)
	df, p := checkDockerfile(data, goModVersion(t))
	requireNone(t, p)
	return df
}

// TestDockerfile: the Dockerfile passes and installs the binary where the
// manifests run it (TestBase checks the manifests' side).
func TestDockerfile(t *testing.T) {
	require.Equal(t, "/rowlift", parseDockerfile(t, dockerfilePath).binary)
}

// TestDockerfileMistakesAreCaught: each mistake, made in the real Dockerfile,
// fails with a message that names it.
func TestDockerfileMistakesAreCaught(t *testing.T) {
	data, err := os.ReadFile(dockerfilePath)
	require.NoError(t, err)
	raw, goVersion := string(data), goModVersion(t)
	for _, tc := range []struct{ name, old, new, want string }{
		{"one stage", "FROM gcr.io/distroless/static-debian12:nonroot\n", "", "1 stage(s)"},
		{"another Go", "golang:" + goVersion + " ", "golang:1.20 ", "want golang:" + goVersion},
		{"cgo", "CGO_ENABLED=0 ", "", "without CGO_ENABLED=0"},
		{"no trimpath", "-trimpath ", "", "without -trimpath"},
		{"no version", "-X main.version=${VERSION}", "", "-X main.version="},
		{"root", "USER 65532:65532", "USER 0", `USER "0"`},
		{"named user", "USER 65532:65532", "USER nonroot", `USER "nonroot"`},
		{"no user", "USER 65532:65532\n", "", `USER ""`},
		{"copies something else", "COPY --from=build /out/rowlift /rowlift", "COPY --from=build /out/other /rowlift", "no COPY --from=build /out/rowlift"},
		{"entrypoint elsewhere", `ENTRYPOINT ["/rowlift"]`, `ENTRYPOINT ["/bin/rowlift"]`, `want ["/rowlift"]`},
		{"shell-form entrypoint", `ENTRYPOINT ["/rowlift"]`, `ENTRYPOINT /rowlift`, "in JSON form"},
		{"no build", "GOARCH=$TARGETARCH go build", "GOARCH=$TARGETARCH go vet", "no RUN ... go build"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			require.True(t, strings.Contains(raw, tc.old), "the mutation's text %q is not in the Dockerfile", tc.old)
			_, p := checkDockerfile([]byte(strings.Replace(raw, tc.old, tc.new, 1)), goVersion)
			require.NotEmpty(t, p, "the mistake passed")
			require.Contains(t, strings.Join(p, "\n"), tc.want)
		})
	}
}
