// Package inspect is what `signagent token check`, `tokens`, `keys` and
// `setup` read from a PKCS#11 module, its tokens and a key: the library's
// own description and its slots, the mechanisms a token offers, the
// objects on it, what is public about a key, and tables of them. Nothing
// here is private: no PIN is kept, no key material read, only what any
// user of the module may see. It reads through package pkcs11's Backend
// seam (pkcs11.WithModule, Token.Read) and never signs.
package inspect
