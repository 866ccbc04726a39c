// Package trustedcmd is the family of trusted authentication: canonical
// (the signed text), sign (its CMS signature on the token), verify, link
// (a service user linked to the partner's) and session (the auth.sid),
// each here or through a running agent.
package trustedcmd
