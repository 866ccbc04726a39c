package cmdutil

import (
	"fmt"
	"runtime"
	"runtime/debug"

	"github.com/signagent/signagent/store"
)

// Version is the program's version: main sets it from its own, which
// -ldflags "-X main.version=..." sets at build time.
var Version = "dev"

// Commit is the commit the program was built from when -ldflags "-X
// main.commit=..." says it (main sets it); "" leaves it to Go's VCS
// stamp.
var Commit string

// BuildInfo is what `signagent version` reports.
type BuildInfo struct {
	Version   string `json:"version"`
	Commit    string `json:"commit,omitempty"`
	Modified  bool   `json:"modified,omitempty"`
	GoVersion string `json:"goVersion"`
	Platform  string `json:"platform"`
	// StoreFormats are the shared store's record formats this build reads
	// and writes (docs/upgrading.md).
	StoreFormats StoreFormats `json:"storeFormats"`
}

// StoreFormats are the record formats a build reads, the one it writes
// until every live agent on the store reads a newer one, and the newest
// it would write then.
type StoreFormats struct {
	Read      []int `json:"read"`
	Write     int   `json:"write"`
	WriteUpTo int   `json:"writeUpTo"`
}

// ReadBuildInfo is the version set with -ldflags "-X main.version=...",
// else the module version Go recorded (`go install ...@v1.2.3` prints
// v1.2.3), "dev" when neither says; and the commit set with -ldflags
// "-X main.commit=...", else the one of Go's VCS stamp.
func ReadBuildInfo(ldflagsVersion, ldflagsCommit string, info *debug.BuildInfo, ok bool) BuildInfo {
	f := store.BuildFormats()
	b := BuildInfo{Version: ldflagsVersion, Commit: ldflagsCommit, GoVersion: runtime.Version(), Platform: runtime.GOOS + "/" + runtime.GOARCH,
		StoreFormats: StoreFormats{Read: f.Read, Write: f.Write, WriteUpTo: f.Read[len(f.Read)-1]}}
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
			if ldflagsCommit == "" {
				b.Commit = s.Value
			}
		case "vcs.modified":
			b.Modified = s.Value == "true"
		}
	}
	return b
}

// CurrentBuild is this binary's version, commit and Go version.
func CurrentBuild() BuildInfo {
	info, ok := debug.ReadBuildInfo()
	return ReadBuildInfo(Version, Commit, info, ok)
}

// String is the build as --version prints it.
func (b BuildInfo) String() string {
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
