// Package agentcmd is the family of the running agent: serve (the
// agent itself, its configuration read through the factory and read again
// on SIGHUP), agent status and identities (asking a running agent, as
// ssh-add -l asks ssh-agent) and store-key (the shared store's key file).
package agentcmd
