// Package configcmd is the family of commands about signagent itself:
// config (the settings file and its contexts, as kubectl config), version,
// completion and man.
package configcmd
