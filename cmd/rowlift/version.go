package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"runtime"
	"runtime/debug"
)

// version is set at build time by the Makefile (-ldflags "-X main.version=...").
var version = ""

func versionCommand() *command {
	return &command{
		name:    "version",
		summary: "print the version of this binary",
		exec: func(_ context.Context, _ *flag.FlagSet, stdout io.Writer) error {
			rev := buildRevision()
			if rev == "" {
				rev = "revision unknown"
			}
			fmt.Fprintf(stdout, "rowlift %s (%s, %s, %s/%s)\n", buildVersion(), rev, runtime.Version(), runtime.GOOS, runtime.GOARCH)
			return nil
		},
	}
}

// buildVersion prefers the version stamped by the Makefile and falls back to the
// module version that `go install` records.
func buildVersion() string {
	if version != "" {
		return version
	}
	if info, ok := debug.ReadBuildInfo(); ok && info.Main.Version != "" && info.Main.Version != "(devel)" {
		return info.Main.Version
	}
	return "devel"
}

// buildRevision is the VCS commit the binary was built from, as go build
// records it in a checkout, "-dirty" added when the tree had changes; "" when
// it was not recorded.
func buildRevision() string {
	info, ok := debug.ReadBuildInfo()
	if !ok {
		return ""
	}
	var rev string
	var dirty bool
	for _, s := range info.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.modified":
			dirty = s.Value == "true"
		}
	}
	if rev != "" && dirty {
		rev += "-dirty"
	}
	return rev
}
