package main

import (
	"fmt"
	"runtime"
	"runtime/debug"

	"github.com/urfave/cli/v2"
)

// Version is the program's version: main sets it from its own, which
// -ldflags "-X main.version=..." sets at build time.
var Version = "dev"

// buildInfo is what `signagent version` reports.
type buildInfo struct {
	Version   string `json:"version"`
	Commit    string `json:"commit,omitempty"`
	Modified  bool   `json:"modified,omitempty"`
	GoVersion string `json:"goVersion"`
	Platform  string `json:"platform"`
}

// readBuildInfo is the version set with -ldflags "-X main.version=...",
// else the module version Go recorded (`go install ...@v1.2.3` prints
// v1.2.3), with the commit from the VCS stamp; "dev" when neither says.
func readBuildInfo(ldflagsVersion string, info *debug.BuildInfo, ok bool) buildInfo {
	b := buildInfo{Version: ldflagsVersion, GoVersion: runtime.Version(), Platform: runtime.GOOS + "/" + runtime.GOARCH}
	if !ok || info == nil {
		return b
	}
	b.GoVersion = info.GoVersion
	if b.Version == "dev" && info.Main.Version != "" && info.Main.Version != "(devel)" {
		b.Version = info.Main.Version
	}
	for _, s := range info.Settings {
		switch s.Key {
		case "vcs.revision":
			b.Commit = s.Value
		case "vcs.modified":
			b.Modified = s.Value == "true"
		}
	}
	return b
}

func currentBuild() buildInfo {
	info, ok := debug.ReadBuildInfo()
	return readBuildInfo(Version, info, ok)
}

func (b buildInfo) String() string {
	s := "signagent " + b.Version
	if b.Commit != "" {
		c := b.Commit
		if len(c) > 12 {
			c = c[:12]
		}
		if b.Modified {
			c += "-dirty"
		}
		s += " (" + c + ")"
	}
	return s + fmt.Sprintf(" %s %s", b.GoVersion, b.Platform)
}

func versionCommand(e *env) *cli.Command {
	return &cli.Command{
		Name:      "version",
		Usage:     "print signagent's version, commit, Go version and platform",
		UsageText: "signagent version [--json]",
		Flags:     []cli.Flag{&cli.BoolFlag{Name: "json", Usage: "print JSON"}},
		Action: func(c *cli.Context) error {
			b := currentBuild()
			if c.Bool("json") {
				return writeJSON(e, b)
			}
			_, err := fmt.Fprintln(e.stdout, b)
			return err
		},
	}
}
