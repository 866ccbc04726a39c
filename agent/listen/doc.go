// Package listen opens the agent's sockets: Unix sockets created with
// their final mode and group before anyone can connect (a stale one of
// the same user replaced, any other left alone), TCP on loopback or
// behind TLS, sockets systemd hands over under the same rules, and a cap
// on the connections each accepts at a time. It knows nothing of HTTP or
// of the agent's callers.
package listen
