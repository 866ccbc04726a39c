// Package tokencmd is the PKCS#11 family: tokens and keys (what the
// module offers), token check (a self-test of the token on what signagent
// needs, hung under token by app) and dev-token (a SoftHSM token for
// development).
package tokencmd
