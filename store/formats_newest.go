//go:build !signagent_format3

package store

// newestFormat is the newest record format this build reads, and so the
// highest it writes (when every live agent reads it too).
const newestFormat = baseFormat
