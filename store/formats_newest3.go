//go:build signagent_format3

package store

// newestFormat is, in a build with the test-only tag signagent_format3,
// the test-only format 3 (format3.go): the build stands for a next
// release whose records a release of today does not read, so that the
// upgrade and the rollback between the two are tested with two real
// builds on one store. It is never shipped.
const newestFormat = format3
