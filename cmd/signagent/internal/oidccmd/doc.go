// Package oidccmd is the OpenID Connect family: login (device or
// authorization-code flow, or a refresh token issued beforehand), token
// (the profile's access token, refreshed when due), status and logout
// (the refresh token revoked at the provider first).
package oidccmd
