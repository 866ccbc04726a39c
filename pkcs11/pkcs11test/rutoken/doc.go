// Package rutoken is a Rutoken ECP for tests: a card that answers the APDUs
// OpenSC's rutoken_ecp driver (card-rtecp.c, pkcs15-rtecp.c) sends, as
// ../shared/spec/gost-card-opensc.md section 2 settles them, and that
// connects to vsmartcard's vpcd reader driver itself (Server; vpcd's
// protocol spoken from its documentation: vsmartcard's vicc is GPLv3 and
// none of it is used). Command rutoken-card runs it; pkcs11test.NewGOSTCard
// builds it, puts it behind the card rig's pcscd and personalises it with
// OpenSC's pkcs15-init. Nothing ships it.
//
// What it answers: the ATR; SELECT by FID, by path from the MF, the first
// and next file of a DF and the parent (the file listing), always with an
// FCI whose security attributes are the 15 bytes the driver insists on;
// READ and UPDATE BINARY; CREATE and DELETE FILE; VERIFY (a wrong PIN 6300,
// then the driver's empty VERIFY 63Cx, a blocked PIN 6983); CHANGE
// REFERENCE DATA (chained; a PIN, or key material into the selected key);
// RESET RETRY COUNTER (after the PIN the PIN's attributes name, the SO
// PIN); LOGOUT; MSE SET; PSO COMPUTE DIGITAL SIGNATURE (r then s,
// little-endian, the hash read little-endian); GENERATE KEY (x then y,
// little-endian); GET DATA 01 81, the serial; GET CHALLENGE; the erase and
// end-of-initialisation commands. Keys are GOST R 34.10 on CryptoPro A, B
// or C (internal/gost signs); RSA key objects can be created but not used.
//
// Where it follows the driver rather than Aktiv's card (unpublished): key
// objects are placed in 3F00 1000 1000 6001/6002 by type whatever DF is
// current; a wrong PIN answers 6300; file access conditions are not
// enforced, only a key's use (6982 until its PIN is verified) and PIN
// changes and unblocking. It signs in about a millisecond; a slow card is
// the server's delays.
//
// Faults, set on the control socket (Server; "fault ..."), make it
// misbehave as a real card can: SetSelectKeyFault makes every SELECT of a
// private key object by FID or path answer a status word (6A82: the key
// deleted by another program) until cleared; remove-after-verify takes the
// card out right after it answers 9000 to the next VERIFY with a PIN,
// before the key's SELECT, MSE and PSO reach it (once).
//
// The state (serial, files, PINs with their counters, keys) is saved to a
// file after every change, 0600, and read back at start: a restarted card
// is the same card.
package rutoken
