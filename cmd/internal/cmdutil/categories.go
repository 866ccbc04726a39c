package cmdutil

// The help categories of flags that the families and the factory share:
// a flag set built in one place and a command's own flags beside it are
// listed under one heading.
const (
	// CatLegacy heads the legacy scheme's flags.
	CatLegacy = "Legacy scheme"
	// CatOIDC heads the OpenID Connect flags.
	CatOIDC = "OpenID Connect"
	// CatStore heads the shared store's flags.
	CatStore = "Shared store"
	// CatAgentUse heads the flags that choose whether to ask a running
	// agent.
	CatAgentUse = "Running agent"
)
