// Package legacycmd is the family of the legacy scheme and the business
// calls: legacy-token (a legacy token by password, certificate or
// auth.sid), header (any scheme's Authorization header) and api (a
// business method called with it, as gh api), each here or through a
// running agent.
package legacycmd
