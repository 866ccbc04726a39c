// Package setupcmd is setup: it asks for each setting (or takes them
// from the flags with --non-interactive), checks each as it is given
// (files, addresses, the identity provider, the token and a signature on
// it) and writes a context of the settings file only when all are good.
package setupcmd
