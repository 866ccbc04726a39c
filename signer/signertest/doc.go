// Package signertest holds what tests use to check signagent's CMS from
// the outside: OpenSSL (with the gost engine) and GnuTLS's certtool as
// independent verifiers, OpenSSL as the sender of envelopes (RSA and
// GOST), a DER tree to change one field of a CMS structure, test
// certificates, and the committed GOST certificate-login fixtures
// (testdata/gostcms). Nothing here ships: it is imported by tests only.
package signertest
