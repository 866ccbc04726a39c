/*
 * driver: drives the GOST test module through the mechanism sequences of
 * gost-certlogin.md section 4, for the tests of this package (Go test
 * files may not use cgo). It prints one line per PKCS#11 call, "name rv"
 * with rv in hex, then "plain HEX" when the content was decrypted; it exits
 * 0 when every call succeeded, 1 when one failed (after destroying what it
 * made, unless -keep), 2 on bad usage. After each call that makes or
 * destroys a key, and at the end, it prints "objects N", the module's count
 * of live session keys (the file "objects" beside the module). The PIN is
 * read from a file, never from the command line.
 *
 *   driver [-keep] [-token] [-kdf HEX] MODULE PINFILE MODE ARGS...
 *   a2   EPH UKM ENC MAC WRAPSET IV CONTENTSET CT  derive (kdf 2012-256), CKM_KDF_4357, unwrap, decrypt
 *   a1   EPH UKM ENC MAC WRAPSET IV CONTENTSET CT  derive (kdf 4357), unwrap, decrypt
 *   b    TRANSPORT UKM|- IV CONTENTSET CT           CKM_GOSTR3410_KEY_WRAP, decrypt
 *   vko  EPH UKM DFILE                             nettle's VKO (DFILE: the private scalar, hex) (KEK printed), a CEK wrapped under it
 *                                                  with libgcrypt, unwrapped by the module with its own KEK
 *   mechs                                          the mechanism list with flags, the key's CKA_DERIVE
 *                                                  and CKA_UNWRAP, C_DestroyObject of the private key
 *
 * Values are hex; WRAPSET and CONTENTSET are DER OIDs; -token asks the
 * derive for a token object; -kdf replaces the derive's kdf.
 */
#include <p11-kit/pkcs11.h>
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <gcrypt.h>
#include <gmp.h>
#include <nettle/ecc.h>
#include <nettle/ecc-curve.h>
#include <nettle/gostdsa.h>
#include <nettle/streebog.h>

#include "../module/gostparams.h"

static CK_FUNCTION_LIST_PTR f;
static CK_SESSION_HANDLE s;
static CK_OBJECT_HANDLE made[8];
static int nmade, keep, failed;
static char objpath[4096];

static void die(const char *msg) {
	fprintf(stderr, "driver: %s\n", msg);
	exit(2);
}

static size_t unhex(const char *h, unsigned char *out, size_t cap) {
	size_t n = strlen(h) / 2;
	if (strlen(h) % 2 || n > cap) die("bad hex");
	for (size_t i = 0; i < n; i++) sscanf(h + 2 * i, "%2hhx", &out[i]);
	return n;
}

static void hex(const char *label, const unsigned char *b, size_t n) {
	printf("%s ", label);
	for (size_t i = 0; i < n; i++) printf("%02x", b[i]);
	printf("\n");
}

/* call records one call's result; after a failure the rest is skipped. */
static int call(const char *name, CK_RV rv) {
	printf("%s 0x%lx\n", name, rv);
	if (rv != CKR_OK) failed = 1;
	return rv == CKR_OK;
}

static void objects(void) {
	int n = -1;
	FILE *o = fopen(objpath, "r");
	if (o) {
		if (fscanf(o, "%d", &n) != 1) n = -1;
		fclose(o);
	}
	printf("objects %d\n", n);
}

static void finish(void) {
	if (!keep)
		for (int i = nmade - 1; i >= 0; i--) {
			call("C_DestroyObject", f->C_DestroyObject(s, made[i]));
			objects();
		}
	call("C_CloseSession", f->C_CloseSession(s));
	objects();
	call("C_Finalize", f->C_Finalize(NULL));
	exit(failed);
}

static CK_OBJECT_HANDLE private_key(void) {
	CK_OBJECT_CLASS cls = CKO_PRIVATE_KEY;
	CK_ATTRIBUTE t[] = {{CKA_CLASS, &cls, sizeof cls}};
	CK_OBJECT_HANDLE h = 0;
	CK_ULONG n = 0;
	if (f->C_FindObjectsInit(s, t, 1) || f->C_FindObjects(s, &h, 1, &n) || f->C_FindObjectsFinal(s) || n != 1)
		die("no private key");
	return h;
}

/* A template for a new GOST 28147 key with S-box set (DER OID). */
static CK_OBJECT_CLASS sk = CKO_SECRET_KEY;
static CK_KEY_TYPE kt = CKK_GOST28147;
static CK_BBOOL yes = CK_TRUE, no = CK_FALSE;
static int tmpl(CK_ATTRIBUTE *t, const unsigned char *set, size_t setlen, int token) {
	int n = 0;
	t[n++] = (CK_ATTRIBUTE){CKA_CLASS, &sk, sizeof sk};
	t[n++] = (CK_ATTRIBUTE){CKA_KEY_TYPE, &kt, sizeof kt};
	t[n++] = (CK_ATTRIBUTE){CKA_TOKEN, token ? &yes : &no, 1};
	t[n++] = (CK_ATTRIBUTE){CKA_SENSITIVE, &yes, 1};
	t[n++] = (CK_ATTRIBUTE){CKA_EXTRACTABLE, &no, 1};
	t[n++] = (CK_ATTRIBUTE){CKA_UNWRAP, &yes, 1};
	t[n++] = (CK_ATTRIBUTE){CKA_DECRYPT, &yes, 1};
	t[n++] = (CK_ATTRIBUTE){CKA_DERIVE, &yes, 1};
	t[n++] = (CK_ATTRIBUTE){CKA_GOST28147_PARAMS, (void *)set, setlen};
	return n;
}

static void attributes(CK_OBJECT_HANDLE h) {
	CK_ULONG cls = 0, type = 0;
	CK_BBOOL sens = 0, ext = 1;
	unsigned char params[32], val[32];
	CK_ATTRIBUTE t[] = {{CKA_CLASS, &cls, sizeof cls}, {CKA_KEY_TYPE, &type, sizeof type},
			    {CKA_SENSITIVE, &sens, 1}, {CKA_EXTRACTABLE, &ext, 1}, {CKA_GOST28147_PARAMS, params, sizeof params}};
	if (call("C_GetAttributeValue", f->C_GetAttributeValue(s, h, t, 5)))
		printf("attrs class=0x%lx type=0x%lx sensitive=%d extractable=%d params=%lu\n", cls, type, sens, ext, t[4].ulValueLen);
	CK_ATTRIBUTE v = {CKA_VALUE, val, sizeof val};
	printf("C_GetAttributeValue(CKA_VALUE) 0x%lx\n", f->C_GetAttributeValue(s, h, &v, 1));
}

static void decrypt(CK_OBJECT_HANDLE cek, const char *ivh, const char *cth) {
	unsigned char iv[8], ct[8192], pt[8192];
	if (unhex(ivh, iv, sizeof iv) != 8) die("IV: 8 bytes");
	size_t n = unhex(cth, ct, sizeof ct);
	CK_MECHANISM m = {CKM_GOST28147, iv, 8};
	if (!call("C_DecryptInit", f->C_DecryptInit(s, &m, cek))) finish();
	CK_ULONG l = 0;
	if (!call("C_Decrypt(NULL)", f->C_Decrypt(s, ct, n, NULL, &l))) finish();
	if (l != n) die("the length query gave another length");
	if (!call("C_Decrypt", f->C_Decrypt(s, ct, n, pt, &l))) finish();
	hex("plain", pt, l);
}

static CK_OBJECT_HANDLE derive(CK_OBJECT_HANDLE base, CK_MECHANISM *m, const unsigned char *set, size_t setlen, int token) {
	CK_ATTRIBUTE t[10];
	CK_OBJECT_HANDLE h = 0;
	int n = tmpl(t, set, setlen, token);
	if (!call("C_DeriveKey", f->C_DeriveKey(s, m, base, t, n, &h))) finish();
	made[nmade++] = h;
	objects();
	return h;
}

static CK_OBJECT_HANDLE unwrap(CK_MECHANISM *m, CK_OBJECT_HANDLE key, unsigned char *w, size_t wl, const unsigned char *set, size_t setlen) {
	CK_ATTRIBUTE t[10];
	CK_OBJECT_HANDLE h = 0;
	int n = tmpl(t, set, setlen, 0);
	if (!call("C_UnwrapKey", f->C_UnwrapKey(s, m, key, w, wl, t, n, &h))) finish();
	made[nmade++] = h;
	objects();
	return h;
}

/* nettle_kek is VKO with nettle: Streebog-256 of the point gostdsa_vko gives. */
static void nettle_kek(const char *dfile, const unsigned char *eph, size_t ephlen, const unsigned char ukm[8], unsigned char kek[32]) {
	const struct ecc_curve *c = ephlen == 64 ? nettle_get_gost_gc256b() : nettle_get_gost_gc512a();
	size_t n = ephlen / 2;
	unsigned char be[64], out[128];
	mpz_t x, y, d;
	for (size_t i = 0; i < n; i++) be[i] = eph[n - 1 - i];
	mpz_init(x), mpz_import(x, n, 1, 1, 0, 0, be);
	for (size_t i = 0; i < n; i++) be[i] = eph[2 * n - 1 - i];
	mpz_init(y), mpz_import(y, n, 1, 1, 0, 0, be);
	char dhex[160];
	FILE *df = fopen(dfile, "r");
	if (!df || !fgets(dhex, sizeof dhex, df)) die("cannot read the private scalar");
	fclose(df);
	dhex[strcspn(dhex, "\r\n")] = 0;
	if (mpz_init_set_str(d, dhex, 16)) die("the private scalar is not hex");
	struct ecc_point p;
	struct ecc_scalar k;
	ecc_point_init(&p, c), ecc_scalar_init(&k, c);
	if (!ecc_point_set(&p, x, y)) die("nettle: the point is not on the curve");
	if (!ecc_scalar_set(&k, d)) die("nettle: bad scalar");
	gostdsa_vko(&k, &p, 8, ukm, out);
	struct streebog256_ctx h;
	streebog256_init(&h);
	streebog256_update(&h, 2 * n, out);
	streebog256_digest(&h, 32, kek);
}

int main(int argc, char **argv) {
	int a = 1, token = 0;
	CK_ULONG kdf = 0;
	for (; a < argc && argv[a][0] == '-'; a++) {
		if (!strcmp(argv[a], "-keep")) keep = 1;
		else if (!strcmp(argv[a], "-token")) token = 1;
		else if (!strcmp(argv[a], "-kdf") && a + 1 < argc) kdf = strtoul(argv[++a], NULL, 16);
		else die("unknown flag");
	}
	if (argc - a < 3) die("usage: driver [-keep] [-token] [-kdf HEX] MODULE PINFILE MODE ARGS...");
	const char *mode = argv[a + 2];
	char **arg = argv + a + 3;
	int nargs = argc - a - 3;
	snprintf(objpath, sizeof objpath, "%s", argv[a]);
	char *slash = strrchr(objpath, '/');
	snprintf(slash ? slash + 1 : objpath, sizeof objpath - (slash ? slash + 1 - objpath : 0), "objects");
	void *lib = dlopen(argv[a], RTLD_NOW);
	if (!lib) die(dlerror());
	CK_RV (*gfl)(CK_FUNCTION_LIST_PTR_PTR) = dlsym(lib, "C_GetFunctionList");
	if (!gfl || gfl(&f) != CKR_OK) die("no C_GetFunctionList");
	char pin[128];
	FILE *pf = fopen(argv[a + 1], "r");
	if (!pf || !fgets(pin, sizeof pin, pf)) die("cannot read the PIN file");
	fclose(pf);
	pin[strcspn(pin, "\r\n")] = 0;
	if (!call("C_Initialize", f->C_Initialize(NULL))) exit(1);
	if (!call("C_OpenSession", f->C_OpenSession(0, CKF_SERIAL_SESSION | CKF_RW_SESSION, NULL, NULL, &s))) exit(1);
	if (!call("C_Login", f->C_Login(s, CKU_USER, (CK_UTF8CHAR_PTR)pin, strlen(pin)))) finish();
	memset(pin, 0, sizeof pin);
	CK_OBJECT_HANDLE priv = private_key();

	if (!strcmp(mode, "mechs")) {
		CK_MECHANISM_TYPE list[32];
		CK_ULONG n = 32;
		if (!call("C_GetMechanismList", f->C_GetMechanismList(0, list, &n))) finish();
		for (CK_ULONG i = 0; i < n; i++) {
			CK_MECHANISM_INFO mi;
			if (call("C_GetMechanismInfo", f->C_GetMechanismInfo(0, list[i], &mi)))
				printf("mech 0x%lx flags 0x%lx\n", list[i], mi.flags);
		}
		CK_BBOOL der = 0, unw = 0;
		CK_ATTRIBUTE t[] = {{CKA_DERIVE, &der, 1}, {CKA_UNWRAP, &unw, 1}};
		if (call("C_GetAttributeValue", f->C_GetAttributeValue(s, priv, t, 2))) printf("private derive=%d unwrap=%d\n", der, unw);
		printf("C_DestroyObject(private) 0x%lx\n", f->C_DestroyObject(s, priv));
		finish();
	}
	if ((!strcmp(mode, "a1") || !strcmp(mode, "a2")) && nargs == 8) {
		unsigned char eph[256], ukm[16], w[36], set[64], cset[64];
		size_t ephlen = unhex(arg[0], eph, sizeof eph), ukmlen = unhex(arg[1], ukm, sizeof ukm);
		if (unhex(arg[2], w, 32) != 32 || unhex(arg[3], w + 32, 4) != 4) die("ENC 32 bytes, MAC 4");
		size_t setlen = unhex(arg[4], set, sizeof set), csetlen = unhex(arg[6], cset, sizeof cset);
		int two = mode[1] == '2';
		struct derive_params p = {kdf ? kdf : two ? CKD_KDF_GOSTR3411_2012_256 : CKD_KDF_4357, eph, ephlen, ukm, ukmlen};
		CK_MECHANISM m = {CKM_GOSTR3410_12_DERIVE, &p, sizeof p};
		CK_OBJECT_HANDLE kek = derive(priv, &m, set, setlen, token);
		attributes(kek);
		if (two) {
			CK_MECHANISM m2 = {CKM_KDF_4357, ukm, ukmlen};
			kek = derive(kek, &m2, set, setlen, 0);
		}
		CK_MECHANISM mw = {CKM_GOST28147_KEY_WRAP, ukm, ukmlen};
		CK_OBJECT_HANDLE cek = unwrap(&mw, kek, w, 36, cset, csetlen);
		decrypt(cek, arg[5], arg[7]);
		finish();
	}
	if (!strcmp(mode, "b") && nargs == 5) {
		unsigned char tr[1024], ukm[16], cset[64];
		size_t trlen = unhex(arg[0], tr, sizeof tr), ukmlen = 0, csetlen = unhex(arg[3], cset, sizeof cset);
		if (strcmp(arg[1], "-")) ukmlen = unhex(arg[1], ukm, sizeof ukm);
		struct keywrap_params p = {NULL, 0, ukmlen ? ukm : NULL, ukmlen, priv};
		CK_MECHANISM m = {CKM_GOSTR3410_KEY_WRAP, &p, sizeof p};
		CK_OBJECT_HANDLE cek = unwrap(&m, priv, tr, trlen, cset, csetlen);
		attributes(cek);
		decrypt(cek, arg[2], arg[4]);
		finish();
	}
	if (!strcmp(mode, "vko") && nargs == 3) {
		/* The KEK is sensitive: the module shows it has nettle's by unwrapping with it. */
		unsigned char eph[256], ukm[8], kek[32], w[36], cek[32], pt[64], ct[64];
		size_t ephlen = unhex(arg[0], eph, sizeof eph);
		if (unhex(arg[1], ukm, sizeof ukm) != 8) die("UKM: 8 bytes");
		nettle_kek(arg[2], eph, ephlen, ukm, kek);
		hex("nettle-kek", kek, 32);
		static const char *z = "1.2.643.7.1.2.5.1.1";
		const unsigned char zder[] = {0x06, 0x09, 0x2a, 0x85, 0x03, 0x07, 0x01, 0x02, 0x05, 0x01, 0x01};
		gcry_check_version(NULL);
		gcry_randomize(cek, 32, GCRY_STRONG_RANDOM);
		gcry_randomize(pt, sizeof pt, GCRY_STRONG_RANDOM);
		gcry_cipher_hd_t c;
		gcry_cipher_open(&c, GCRY_CIPHER_GOST28147, GCRY_CIPHER_MODE_ECB, 0);
		gcry_cipher_set_sbox(c, z);
		gcry_cipher_setkey(c, kek, 32);
		gcry_cipher_encrypt(c, w, 32, cek, 32);
		gcry_cipher_close(c);
		gcry_mac_hd_t mh;
		size_t ml = 4;
		gcry_mac_open(&mh, GCRY_MAC_GOST28147_IMIT, 0, NULL);
		gcry_mac_ctl(mh, GCRYCTL_SET_SBOX, (void *)z, strlen(z));
		gcry_mac_setkey(mh, kek, 32);
		gcry_mac_setiv(mh, ukm, 8);
		gcry_mac_write(mh, cek, 32);
		gcry_mac_read(mh, w + 32, &ml);
		gcry_mac_close(mh);
		unsigned char iv[8] = {1, 2, 3, 4, 5, 6, 7, 8};
		gcry_cipher_open(&c, GCRY_CIPHER_GOST28147_MESH, GCRY_CIPHER_MODE_CFB, 0);
		gcry_cipher_set_sbox(c, z);
		gcry_cipher_setkey(c, cek, 32);
		gcry_cipher_setiv(c, iv, 8);
		gcry_cipher_encrypt(c, ct, sizeof ct, pt, sizeof pt);
		gcry_cipher_close(c);
		hex("sent", pt, sizeof pt);
		struct derive_params p = {CKD_KDF_GOSTR3411_2012_256, eph, ephlen, ukm, 8};
		CK_MECHANISM m = {CKM_GOSTR3410_12_DERIVE, &p, sizeof p};
		CK_OBJECT_HANDLE mk = derive(priv, &m, zder, sizeof zder, 0);
		CK_MECHANISM mw = {CKM_GOST28147_KEY_WRAP, ukm, 8};
		CK_OBJECT_HANDLE h = unwrap(&mw, mk, w, 36, zder, sizeof zder);
		char ivh[17], cth[2 * sizeof ct + 1];
		for (int i = 0; i < 8; i++) sprintf(ivh + 2 * i, "%02x", iv[i]);
		for (size_t i = 0; i < sizeof ct; i++) sprintf(cth + 2 * i, "%02x", ct[i]);
		decrypt(h, ivh, cth);
		finish();
	}
	die("unknown mode or wrong number of arguments");
}
