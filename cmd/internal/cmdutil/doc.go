// Package cmdutil is what the three commands (signagent, signagent-emulator,
// signagent-bench) share of the command line: the flag sets every family
// takes (the token, the credential, the API key) and their help
// categories, the secrets' specs (where each is given: a file flag and
// variables, never a flag's value), reading the settings file into a
// command, the logger, the exit status from an error's kind in one table,
// output (JSON, tables, secrets on stdout), completion and the manual
// page.
package cmdutil
