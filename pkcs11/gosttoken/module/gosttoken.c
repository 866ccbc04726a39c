/*
 * gosttoken: a PKCS#11 module FOR TESTS AND DEVELOPMENT ONLY.
 *
 * No software PKCS#11 token implements GOST R 34.10-2012, so signagent's
 * tests and `signagent token dev --key-type gost2012-256|gost2012-512` use
 * this one: a single slot with one token holding one GOST key pair and its
 * certificate, made by certtool, signing with GnuTLS. The private key sits
 * in a file of the token's directory (TOKEN_DIR, fixed at build time, or,
 * built without it, the directory the module's own file is in):
 * this is not a security device and must never hold a real key.
 *
 * Mechanisms: CKM_GOSTR3411_12_256/512 (C_Digest), CKM_GOSTR3410 and
 * CKM_GOSTR3410_512 over a hash, and CKM_GOSTR3410_WITH_GOSTR3411_12_256/512
 * (the token hashes) unless built with -DRAW_ONLY. The user PIN is in the
 * file "pin"; wrong tries are counted in "tries" and the PIN locks after
 * MAX_TRIES. A file "faults" may hold words that make the token misbehave as
 * a test asks: short-signature, digest-fail, no-sign-mechanisms,
 * paramset=OID, and delay=MS (each signature takes MS milliseconds more,
 * as a card's does; the card does one thing at a time, so it holds the
 * module's lock). Words that make it look like a card behind OpenSC's
 * opensc-pkcs11.so (gost-card-opensc.md): raw-mechanism-only (it lists
 * CKM_GOSTR3410(_512) and nothing else: no Streebog, no hashing signature,
 * no key agreement), no-certificate (the certificate object is not shown,
 * as OpenSC drops a GOST-2012 one) and no-public-key (nor the public key
 * object).
 *
 * Decryption of a GOST key transport (gostkeyx.c, over libgcrypt), as the
 * session objects real GOST tokens make: CKM_GOSTR3410_12_DERIVE (VKO on
 * the private key, whose CKA_DERIVE is true; kdf CKD_KDF_GOSTR3411_2012_256
 * or CKD_KDF_4357, the latter diversifying per RFC 4357 6.5), CKM_KDF_4357
 * (that diversification of a GOST 28147 key, the UKM as parameter),
 * CKM_GOST28147_KEY_WRAP (C_UnwrapKey, the IMIT checked), CKM_GOST28147
 * (single-part C_Decrypt, CFB with CryptoPro key meshing) and
 * C_DestroyObject. Built with -DONE_STEP_UNWRAP the derive and both key
 * wraps give way to CKM_GOSTR3410_KEY_WRAP: C_UnwrapKey with the private
 * key (CKA_UNWRAP true) of a DER GostR3410-KeyTransport, the whole RFC 4490
 * recipient step. The number of live session keys is written to the file
 * "objects" after each key made or destroyed (a test aid). Their faults:
 * no-derive (CKM_GOSTR3410_12_DERIVE not listed and refused), no-kdf4357
 * (CKM_KDF_4357 likewise; the derive's CKD_KDF_4357 still works),
 * kdf=NAME[,NAME] (the derive takes only these kdf, of 2012-256 and 4357;
 * kdf=none takes none: CKR_MECHANISM_PARAM_INVALID), bad-mac (every IMIT
 * check fails: CKR_WRAPPED_KEY_INVALID), no-unwrap-mechanism
 * (CKM_GOST28147_KEY_WRAP and CKM_GOSTR3410_KEY_WRAP not listed and
 * refused), no-decrypt (CKM_GOST28147 likewise), decrypt-fail (C_Decrypt
 * answers CKR_DEVICE_ERROR) and no-derive-attr (the private key's
 * CKA_DERIVE is false, the derive CKR_KEY_FUNCTION_NOT_PERMITTED).
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <p11-kit/pkcs11.h>
#include <p11-kit/pkcs11x.h>
#include <gnutls/gnutls.h>
#include <gnutls/abstract.h>
#include <gnutls/x509.h>
#include <gnutls/crypto.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <stddef.h>
#include <time.h>

#ifndef TOKEN_DIR
/* Empty: the token's directory is the one this module's file is in
 * (dladdr), so that one build serves every token it is copied into. */
#define TOKEN_DIR ""
#endif
#ifndef MAX_TRIES
#define MAX_TRIES 3
#endif
#define MAX_SESSIONS 64

#define H_PRIV 1
#define H_PUB 2
#define H_CERT 3

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static int initialized, logged_in;
static gnutls_privkey_t priv;
static int bits; /* 256 or 512 */
static unsigned char pubval[128], params[64], dparams[16], certder[8192], subject[1024], issuer[1024], serial[64];
static size_t pubval_len, params_len, dparams_len, certder_len, subject_len, issuer_len, serial_len;
static char label[33] = "signagent-dev";
static unsigned char keyid[] = {0x01};

struct session {
	int open;
	CK_FLAGS flags;
	/* find */
	int finding, found[3], nfound, next;
	/* sign */
	CK_MECHANISM_TYPE sign_mech;
	int signing;
	/* digest */
	gnutls_hash_hd_t dig;
	int digest_bits;
};
static struct session sessions[MAX_SESSIONS];

/* gostkeyx.c, included at the end. */
static int kx_load(gnutls_privkey_t key);
static int kx_mechanisms(CK_MECHANISM_TYPE *out);
static CK_FLAGS kx_flags(CK_MECHANISM_TYPE m);
static void kx_close_session(int i);
static void kx_finalize(void);
struct skey;
static struct skey *skey(CK_OBJECT_HANDLE h);
static CK_RV kx_getattr(struct skey *k, CK_ATTRIBUTE_PTR tmpl, CK_ULONG n);

/* token_dir is TOKEN_DIR, or the directory of the module's own file. */
static char tokdir[4096];
static pthread_once_t tokdir_once = PTHREAD_ONCE_INIT;

static void find_token_dir(void) {
	Dl_info info;
	if (TOKEN_DIR[0]) {
		snprintf(tokdir, sizeof tokdir, "%s", TOKEN_DIR);
	} else if (dladdr((void *)find_token_dir, &info) && info.dli_fname) {
		snprintf(tokdir, sizeof tokdir, "%s", info.dli_fname);
		char *slash = strrchr(tokdir, '/');
		if (slash) *slash = 0;
		else snprintf(tokdir, sizeof tokdir, ".");
	}
}

static const char *token_dir(void) {
	pthread_once(&tokdir_once, find_token_dir);
	return tokdir;
}

static const char *path(const char *name) {
	static __thread char buf[4096];
	snprintf(buf, sizeof buf, "%s/%s", token_dir(), name);
	return buf;
}

static int read_file(const char *name, unsigned char *out, size_t cap, size_t *len) {
	FILE *f = fopen(path(name), "rb");
	if (!f) return -1;
	*len = fread(out, 1, cap, f);
	fclose(f);
	return 0;
}

/* fault reports whether the faults file holds word (or word=VALUE, put in val). */
static int fault(const char *word, char *val, size_t cap) {
	unsigned char buf[1024];
	size_t n = 0;
	if (read_file("faults", buf, sizeof buf - 1, &n) != 0) return 0;
	buf[n] = 0;
	size_t wl = strlen(word);
	for (char *p = strtok((char *)buf, " \t\r\n"); p; p = strtok(NULL, " \t\r\n")) {
		if (strncmp(p, word, wl) != 0) continue;
		if (p[wl] == 0) return 1;
		if (p[wl] == '=' && val) {
			snprintf(val, cap, "%s", p + wl + 1);
			return 1;
		}
	}
	return 0;
}

static int tries(void) {
	unsigned char b[16];
	size_t n = 0;
	if (read_file("tries", b, sizeof b - 1, &n) != 0) return 0;
	b[n] = 0;
	return atoi((char *)b);
}

static void set_tries(int t) {
	FILE *f = fopen(path("tries"), "w");
	if (f) {
		fprintf(f, "%d\n", t);
		fclose(f);
	}
}

/* oid_der writes the DER of a dotted OID. */
static size_t oid_der(const char *dotted, unsigned char *out) {
	unsigned long arcs[32];
	int n = 0;
	for (const char *p = dotted; *p && n < 32;) {
		arcs[n++] = strtoul(p, (char **)&p, 10);
		if (*p == '.') p++;
	}
	unsigned char body[64];
	size_t bl = 0;
	for (int i = 1; i < n; i++) {
		unsigned long v = i == 1 ? arcs[0] * 40 + arcs[1] : arcs[i];
		unsigned char tmp[10];
		int t = 0;
		do { tmp[t++] = v & 0x7f; v >>= 7; } while (v);
		while (t--) body[bl++] = tmp[t] | (t ? 0x80 : 0);
	}
	out[0] = 0x06;
	out[1] = (unsigned char)bl;
	memcpy(out + 2, body, bl);
	return bl + 2;
}

static CK_RV load(void) {
	gnutls_datum_t d;
	if (gnutls_load_file(path("key.pem"), &d) < 0) return CKR_DEVICE_ERROR;
	gnutls_privkey_init(&priv);
	int r = gnutls_privkey_import_x509_raw(priv, &d, GNUTLS_X509_FMT_PEM, NULL, 0);
	gnutls_free(d.data);
	if (r < 0) return CKR_DEVICE_ERROR;
	gnutls_pubkey_t pub;
	gnutls_pubkey_init(&pub);
	if (gnutls_pubkey_import_privkey(pub, priv, 0, 0) < 0) return CKR_DEVICE_ERROR;
	gnutls_ecc_curve_t curve;
	gnutls_digest_algorithm_t dg;
	gnutls_gost_paramset_t ps;
	gnutls_datum_t x, y;
	if (gnutls_pubkey_export_gost_raw2(pub, &curve, &dg, &ps, &x, &y, 0) < 0) return CKR_DEVICE_ERROR;
	bits = dg == GNUTLS_DIG_STREEBOG_512 ? 512 : 256;
	size_t n = bits / 8;
	/* GnuTLS exports x and y least significant byte first, as PKCS#11 wants. */
	memset(pubval, 0, sizeof pubval);
	memcpy(pubval, x.data, x.size < n ? x.size : n);
	memcpy(pubval + n, y.data, y.size < n ? y.size : n);
	pubval_len = 2 * n;
	gnutls_free(x.data);
	gnutls_free(y.data);
	gnutls_pubkey_deinit(pub);
	if (kx_load(priv) != 0) return CKR_DEVICE_ERROR;
	char set[128];
	if (fault("paramset", set, sizeof set))
		params_len = oid_der(set, params);
	else
		params_len = oid_der(gnutls_ecc_curve_get_oid(curve), params);
	dparams_len = oid_der(bits == 512 ? "1.2.643.7.1.1.2.3" : "1.2.643.7.1.1.2.2", dparams);

	if (gnutls_load_file(path("cert.pem"), &d) >= 0) {
		gnutls_x509_crt_t crt;
		gnutls_x509_crt_init(&crt);
		if (gnutls_x509_crt_import(crt, &d, GNUTLS_X509_FMT_PEM) >= 0) {
			certder_len = sizeof certder;
			gnutls_x509_crt_export(crt, GNUTLS_X509_FMT_DER, certder, &certder_len);
			gnutls_datum_t dn;
			if (gnutls_x509_crt_get_raw_dn(crt, &dn) >= 0 && dn.size <= sizeof subject) {
				memcpy(subject, dn.data, dn.size);
				subject_len = dn.size;
				gnutls_free(dn.data);
			}
			if (gnutls_x509_crt_get_raw_issuer_dn(crt, &dn) >= 0 && dn.size <= sizeof issuer) {
				memcpy(issuer, dn.data, dn.size);
				issuer_len = dn.size;
				gnutls_free(dn.data);
			}
			serial_len = sizeof serial;
			gnutls_x509_crt_get_serial(crt, serial, &serial_len);
		}
		gnutls_x509_crt_deinit(crt);
		gnutls_free(d.data);
	}
	size_t ll = 0;
	unsigned char lb[32];
	if (read_file("label", lb, sizeof lb, &ll) == 0) {
		while (ll && (lb[ll - 1] == '\n' || lb[ll - 1] == '\r')) ll--;
		memcpy(label, lb, ll);
		label[ll] = 0;
	}
	return CKR_OK;
}

/* The mechanisms offered, by the key's size. */
static int mechanisms(CK_MECHANISM_TYPE *out) {
	int n = 0;
	if (fault("raw-mechanism-only", NULL, 0)) {
		if (!fault("no-sign-mechanisms", NULL, 0))
			out[n++] = bits == 512 ? CKM_GOSTR3410_512 : CKM_GOSTR3410;
		return n;
	}
	out[n++] = bits == 512 ? CKM_GOSTR3411_2012_512 : CKM_GOSTR3411_2012_256;
	if (!fault("no-sign-mechanisms", NULL, 0)) {
		out[n++] = bits == 512 ? CKM_GOSTR3410_512 : CKM_GOSTR3410;
#ifndef RAW_ONLY
		out[n++] = bits == 512 ? CKM_GOSTR3410_WITH_GOSTR3411_2012_512 : CKM_GOSTR3410_WITH_GOSTR3411_2012_256;
#endif
	}
	return n + kx_mechanisms(out + n);
}

static int offered(CK_MECHANISM_TYPE m) {
	CK_MECHANISM_TYPE list[16];
	int n = mechanisms(list);
	for (int i = 0; i < n; i++)
		if (list[i] == m) return 1;
	return 0;
}

/* value answers an attribute: its n bytes at p. */
static const void *value(const void *p, CK_ULONG n, CK_ULONG *len) {
	*len = n;
	return p;
}

/* attribute returns the value of attribute t of object h, or NULL. */
static const void *attribute(int h, CK_ATTRIBUTE_TYPE t, CK_ULONG *len) {
	static __thread CK_ULONG ul;
	static const CK_BBOOL yes = CK_TRUE, no = CK_FALSE;
	switch (t) {
	case CKA_CLASS:
		ul = h == H_PRIV ? CKO_PRIVATE_KEY : h == H_PUB ? CKO_PUBLIC_KEY : CKO_CERTIFICATE;
		return value(&ul, sizeof ul, len);
	case CKA_TOKEN:
		return value(&yes, 1, len);
	case CKA_PRIVATE:
		return value(h == H_PRIV ? &yes : &no, 1, len);
	case CKA_LABEL:
		return value(label, strlen(label), len);
	case CKA_ID:
		return value(keyid, sizeof keyid, len);
	}
	if (h == H_CERT) {
		switch (t) {
		case CKA_CERTIFICATE_TYPE:
			ul = CKC_X_509;
			return value(&ul, sizeof ul, len);
		case CKA_VALUE:
			return value(certder, certder_len, len);
		case CKA_SUBJECT:
			return value(subject, subject_len, len);
		case CKA_ISSUER:
			return value(issuer, issuer_len, len);
		case CKA_SERIAL_NUMBER:
			return value(serial, serial_len, len);
		}
		return NULL;
	}
	switch (t) {
	case CKA_KEY_TYPE:
		ul = bits == 512 ? CKK_GOSTR3410_512 : CKK_GOSTR3410;
		return value(&ul, sizeof ul, len);
	case CKA_GOSTR3410_PARAMS:
		return value(params, params_len, len);
	case CKA_GOSTR3411_PARAMS:
		return value(dparams, dparams_len, len);
	}
	if (h == H_PUB) {
		switch (t) {
		case CKA_VALUE:
			return value(pubval, pubval_len, len);
		case CKA_VERIFY:
			return value(&yes, 1, len);
		case CKA_ENCRYPT:
		case CKA_WRAP:
		case CKA_DERIVE:
			return value(&no, 1, len);
		}
		return NULL;
	}
	switch (t) {
	case CKA_SIGN:
	case CKA_SENSITIVE:
	case CKA_ALWAYS_SENSITIVE:
	case CKA_NEVER_EXTRACTABLE:
	case CKA_LOCAL:
		return value(&yes, 1, len);
	case CKA_DERIVE:
		return value(fault("no-derive-attr", NULL, 0) ? &no : &yes, 1, len);
	case CKA_UNWRAP:
#ifdef ONE_STEP_UNWRAP
		return value(&yes, 1, len);
#else
		return value(&no, 1, len);
#endif
	case CKA_DECRYPT:
	case CKA_EXTRACTABLE:
	case CKA_ALWAYS_AUTHENTICATE:
		return value(&no, 1, len);
	}
	return NULL;
}

static int visible(int h) {
	if (h == H_PUB) return !fault("no-public-key", NULL, 0);
	return h != H_PRIV || logged_in;
}
static int has_cert(void) { return certder_len > 0 && !fault("no-certificate", NULL, 0); }

#define LOCKED(body)                                   \
	do {                                           \
		pthread_mutex_lock(&mu);               \
		CK_RV rv_ = ({ body; });               \
		pthread_mutex_unlock(&mu);             \
		return rv_;                            \
	} while (0)

/* ANSWER_LENGTH returns from a call that puts n bytes in out when out is
 * NULL (the caller asks the length: CKR_OK) or *outlen is short
 * (CKR_BUFFER_TOO_SMALL), with *outlen = n: PKCS#11's convention for
 * output buffers (v2.40 section 5.2). */
#define ANSWER_LENGTH(out, outlen, n)                                      \
	do {                                                               \
		if (!(out) || *(outlen) < (n)) {                           \
			CK_RV rv_ = (out) ? CKR_BUFFER_TOO_SMALL : CKR_OK; \
			*(outlen) = (n);                                   \
			return rv_;                                        \
		}                                                          \
	} while (0)

static struct session *sess(CK_SESSION_HANDLE h) {
	if (h < 1 || h > MAX_SESSIONS || !sessions[h - 1].open) return NULL;
	return &sessions[h - 1];
}

/* OPEN_SESSION declares s, session h, and returns
 * CKR_SESSION_HANDLE_INVALID when h is no open session. */
#define OPEN_SESSION(s, h)                                  \
	struct session *s = sess(h);                        \
	if (!s) return CKR_SESSION_HANDLE_INVALID

static CK_RV init_(void) {
	if (initialized) return CKR_CRYPTOKI_ALREADY_INITIALIZED;
	CK_RV rv = load();
	if (rv != CKR_OK) return rv;
	initialized = 1;
	return CKR_OK;
}
static CK_RV tC_Initialize(CK_VOID_PTR args) { (void)args; LOCKED(init_()); }

static CK_RV fin_(void) {
	if (!initialized) return CKR_CRYPTOKI_NOT_INITIALIZED;
	for (int i = 0; i < MAX_SESSIONS; i++) {
		if (sessions[i].dig) gnutls_hash_deinit(sessions[i].dig, NULL);
		memset(&sessions[i], 0, sizeof sessions[i]);
	}
	kx_finalize();
	gnutls_privkey_deinit(priv);
	priv = NULL;
	initialized = logged_in = 0;
	certder_len = 0;
	return CKR_OK;
}
static CK_RV tC_Finalize(CK_VOID_PTR r) { (void)r; LOCKED(fin_()); }

static void pad(unsigned char *dst, const char *src, size_t n) {
	memset(dst, ' ', n);
	memcpy(dst, src, strlen(src) < n ? strlen(src) : n);
}

static CK_RV tC_GetInfo(CK_INFO_PTR info) {
	if (!initialized) return CKR_CRYPTOKI_NOT_INITIALIZED;
	memset(info, 0, sizeof *info);
	info->cryptokiVersion.major = 2;
	info->cryptokiVersion.minor = 40;
	pad(info->manufacturerID, "signagent test module", 32);
	pad(info->libraryDescription, "gosttoken (tests only)", 32);
	return CKR_OK;
}

static CK_RV tC_GetSlotList(CK_BBOOL present, CK_SLOT_ID_PTR list, CK_ULONG_PTR count) {
	(void)present;
	if (!initialized) return CKR_CRYPTOKI_NOT_INITIALIZED;
	if (!list) { *count = 1; return CKR_OK; }
	if (*count < 1) { *count = 1; return CKR_BUFFER_TOO_SMALL; }
	list[0] = 0;
	*count = 1;
	return CKR_OK;
}

static CK_RV tC_GetSlotInfo(CK_SLOT_ID slot, CK_SLOT_INFO_PTR info) {
	if (!initialized) return CKR_CRYPTOKI_NOT_INITIALIZED;
	if (slot != 0) return CKR_SLOT_ID_INVALID;
	memset(info, 0, sizeof *info);
	pad(info->slotDescription, "gosttoken slot", 64);
	pad(info->manufacturerID, "signagent test module", 32);
	info->flags = CKF_TOKEN_PRESENT;
	return CKR_OK;
}

static CK_RV tC_GetTokenInfo(CK_SLOT_ID slot, CK_TOKEN_INFO_PTR info) {
	if (!initialized) return CKR_CRYPTOKI_NOT_INITIALIZED;
	if (slot != 0) return CKR_SLOT_ID_INVALID;
	memset(info, 0, sizeof *info);
	pad(info->label, label, 32);
	pad(info->manufacturerID, "signagent test module", 32);
	pad(info->model, bits == 512 ? "gosttoken-512" : "gosttoken-256", 16);
	pad((unsigned char *)info->serialNumber, "0001", 16);
	info->flags = CKF_LOGIN_REQUIRED | CKF_USER_PIN_INITIALIZED | CKF_TOKEN_INITIALIZED;
	int t = tries();
	if (t > 0) info->flags |= CKF_USER_PIN_COUNT_LOW;
	if (t == MAX_TRIES - 1) info->flags |= CKF_USER_PIN_FINAL_TRY;
	if (t >= MAX_TRIES) info->flags |= CKF_USER_PIN_LOCKED;
	info->ulMaxSessionCount = MAX_SESSIONS;
	info->ulMaxRwSessionCount = MAX_SESSIONS;
	info->ulMaxPinLen = 64;
	info->ulMinPinLen = 4;
	info->ulTotalPublicMemory = info->ulFreePublicMemory = CK_UNAVAILABLE_INFORMATION;
	info->ulTotalPrivateMemory = info->ulFreePrivateMemory = CK_UNAVAILABLE_INFORMATION;
	info->hardwareVersion.major = info->firmwareVersion.major = 1;
	return CKR_OK;
}

static CK_RV tC_GetMechanismList(CK_SLOT_ID slot, CK_MECHANISM_TYPE_PTR list, CK_ULONG_PTR count) {
	if (!initialized) return CKR_CRYPTOKI_NOT_INITIALIZED;
	if (slot != 0) return CKR_SLOT_ID_INVALID;
	CK_MECHANISM_TYPE m[16];
	int n = mechanisms(m);
	if (!list) { *count = n; return CKR_OK; }
	if (*count < (CK_ULONG)n) { *count = n; return CKR_BUFFER_TOO_SMALL; }
	memcpy(list, m, n * sizeof m[0]);
	*count = n;
	return CKR_OK;
}

static CK_RV tC_GetMechanismInfo(CK_SLOT_ID slot, CK_MECHANISM_TYPE type, CK_MECHANISM_INFO_PTR info) {
	if (!initialized) return CKR_CRYPTOKI_NOT_INITIALIZED;
	if (slot != 0) return CKR_SLOT_ID_INVALID;
	if (!offered(type)) return CKR_MECHANISM_INVALID;
	info->ulMinKeySize = info->ulMaxKeySize = bits;
	info->flags = CKF_HW;
	if (kx_flags(type)) {
		info->flags |= kx_flags(type);
		if (type == CKM_GOST28147 || type == CKM_GOST28147_KEY_WRAP || type == CKM_KDF_4357)
			info->ulMinKeySize = info->ulMaxKeySize = 32; /* bytes, for secret keys */
	} else if (type == CKM_GOSTR3411_2012_256 || type == CKM_GOSTR3411_2012_512)
		info->flags |= CKF_DIGEST;
	else
		info->flags |= CKF_SIGN;
	return CKR_OK;
}

static CK_RV open_(CK_SLOT_ID slot, CK_FLAGS flags, CK_SESSION_HANDLE_PTR h) {
	if (!initialized) return CKR_CRYPTOKI_NOT_INITIALIZED;
	if (slot != 0) return CKR_SLOT_ID_INVALID;
	if (!(flags & CKF_SERIAL_SESSION)) return CKR_SESSION_PARALLEL_NOT_SUPPORTED;
	for (int i = 0; i < MAX_SESSIONS; i++) {
		if (!sessions[i].open) {
			memset(&sessions[i], 0, sizeof sessions[i]);
			sessions[i].open = 1;
			sessions[i].flags = flags;
			*h = i + 1;
			return CKR_OK;
		}
	}
	return CKR_SESSION_COUNT;
}
static CK_RV tC_OpenSession(CK_SLOT_ID slot, CK_FLAGS flags, CK_VOID_PTR app, CK_NOTIFY n, CK_SESSION_HANDLE_PTR h) {
	(void)app; (void)n;
	LOCKED(open_(slot, flags, h));
}

static void close_one(struct session *s) {
	kx_close_session((int)(s - sessions));
	if (s->dig) gnutls_hash_deinit(s->dig, NULL);
	memset(s, 0, sizeof *s);
}

static int open_count(void) {
	int n = 0;
	for (int i = 0; i < MAX_SESSIONS; i++) n += sessions[i].open;
	return n;
}

static CK_RV close_(CK_SESSION_HANDLE h) {
	if (!initialized) return CKR_CRYPTOKI_NOT_INITIALIZED;
	OPEN_SESSION(s, h);
	close_one(s);
	if (open_count() == 0) logged_in = 0;
	return CKR_OK;
}
static CK_RV tC_CloseSession(CK_SESSION_HANDLE h) { LOCKED(close_(h)); }

static CK_RV closeall_(CK_SLOT_ID slot) {
	if (!initialized) return CKR_CRYPTOKI_NOT_INITIALIZED;
	if (slot != 0) return CKR_SLOT_ID_INVALID;
	for (int i = 0; i < MAX_SESSIONS; i++)
		if (sessions[i].open) close_one(&sessions[i]);
	logged_in = 0;
	return CKR_OK;
}
static CK_RV tC_CloseAllSessions(CK_SLOT_ID slot) { LOCKED(closeall_(slot)); }

static CK_RV info_(CK_SESSION_HANDLE h, CK_SESSION_INFO_PTR info) {
	OPEN_SESSION(s, h);
	info->slotID = 0;
	info->flags = s->flags;
	info->ulDeviceError = 0;
	int rw = s->flags & CKF_RW_SESSION;
	info->state = logged_in ? (rw ? CKS_RW_USER_FUNCTIONS : CKS_RO_USER_FUNCTIONS) : (rw ? CKS_RW_PUBLIC_SESSION : CKS_RO_PUBLIC_SESSION);
	return CKR_OK;
}
static CK_RV tC_GetSessionInfo(CK_SESSION_HANDLE h, CK_SESSION_INFO_PTR info) { LOCKED(info_(h, info)); }

static CK_RV login_(CK_SESSION_HANDLE h, CK_USER_TYPE who, CK_UTF8CHAR_PTR pin, CK_ULONG len) {
	if (!sess(h)) return CKR_SESSION_HANDLE_INVALID;
	if (who != CKU_USER) return CKR_USER_TYPE_INVALID;
	if (logged_in) return CKR_USER_ALREADY_LOGGED_IN;
	if (!pin) return CKR_ARGUMENTS_BAD; /* no PIN pad here */
	int t = tries();
	if (t >= MAX_TRIES) return CKR_PIN_LOCKED;
	unsigned char want[128];
	size_t wl = 0;
	if (read_file("pin", want, sizeof want, &wl) != 0) return CKR_DEVICE_ERROR;
	while (wl && (want[wl - 1] == '\n' || want[wl - 1] == '\r')) wl--;
	if (len != wl || memcmp(pin, want, wl) != 0) {
		set_tries(t + 1);
		return t + 1 >= MAX_TRIES ? CKR_PIN_LOCKED : CKR_PIN_INCORRECT;
	}
	if (t) set_tries(0);
	logged_in = 1;
	return CKR_OK;
}
static CK_RV tC_Login(CK_SESSION_HANDLE h, CK_USER_TYPE who, CK_UTF8CHAR_PTR pin, CK_ULONG len) { LOCKED(login_(h, who, pin, len)); }

static CK_RV logout_(CK_SESSION_HANDLE h) {
	if (!sess(h)) return CKR_SESSION_HANDLE_INVALID;
	if (!logged_in) return CKR_USER_NOT_LOGGED_IN;
	logged_in = 0;
	return CKR_OK;
}
static CK_RV tC_Logout(CK_SESSION_HANDLE h) { LOCKED(logout_(h)); }

static CK_RV findinit_(CK_SESSION_HANDLE h, CK_ATTRIBUTE_PTR tmpl, CK_ULONG n) {
	OPEN_SESSION(s, h);
	if (s->finding) return CKR_OPERATION_ACTIVE;
	s->finding = 1;
	s->nfound = s->next = 0;
	for (int o = H_PRIV; o <= H_CERT; o++) {
		if (!visible(o) || (o == H_CERT && !has_cert())) continue;
		int match = 1;
		for (CK_ULONG i = 0; i < n && match; i++) {
			CK_ULONG len;
			const void *v = attribute(o, tmpl[i].type, &len);
			match = v && len == tmpl[i].ulValueLen && memcmp(v, tmpl[i].pValue, len) == 0;
		}
		if (match) s->found[s->nfound++] = o;
	}
	return CKR_OK;
}
static CK_RV tC_FindObjectsInit(CK_SESSION_HANDLE h, CK_ATTRIBUTE_PTR t, CK_ULONG n) { LOCKED(findinit_(h, t, n)); }

static CK_RV find_(CK_SESSION_HANDLE h, CK_OBJECT_HANDLE_PTR out, CK_ULONG max, CK_ULONG_PTR count) {
	OPEN_SESSION(s, h);
	if (!s->finding) return CKR_OPERATION_NOT_INITIALIZED;
	*count = 0;
	while (*count < max && s->next < s->nfound) out[(*count)++] = s->found[s->next++];
	return CKR_OK;
}
static CK_RV tC_FindObjects(CK_SESSION_HANDLE h, CK_OBJECT_HANDLE_PTR out, CK_ULONG max, CK_ULONG_PTR count) { LOCKED(find_(h, out, max, count)); }

static CK_RV findfinal_(CK_SESSION_HANDLE h) {
	OPEN_SESSION(s, h);
	if (!s->finding) return CKR_OPERATION_NOT_INITIALIZED;
	s->finding = 0;
	return CKR_OK;
}
static CK_RV tC_FindObjectsFinal(CK_SESSION_HANDLE h) { LOCKED(findfinal_(h)); }

/* put answers one attribute of C_GetAttributeValue with v, len (v NULL: the object has none). */
static CK_RV put(CK_ATTRIBUTE_PTR a, const void *v, CK_ULONG len) {
	if (!v) {
		a->ulValueLen = CK_UNAVAILABLE_INFORMATION;
		return CKR_ATTRIBUTE_TYPE_INVALID;
	}
	if (!a->pValue) {
		a->ulValueLen = len;
		return CKR_OK;
	}
	if (a->ulValueLen < len) {
		a->ulValueLen = CK_UNAVAILABLE_INFORMATION;
		return CKR_BUFFER_TOO_SMALL;
	}
	memcpy(a->pValue, v, len);
	a->ulValueLen = len;
	return CKR_OK;
}

static CK_RV getattr_(CK_SESSION_HANDLE h, CK_OBJECT_HANDLE o, CK_ATTRIBUTE_PTR tmpl, CK_ULONG n) {
	if (!sess(h)) return CKR_SESSION_HANDLE_INVALID;
	if (skey(o)) return kx_getattr(skey(o), tmpl, n);
	if (o < H_PRIV || o > H_CERT || !visible(o) || (o == H_CERT && !has_cert())) return CKR_OBJECT_HANDLE_INVALID;
	CK_RV rv = CKR_OK;
	for (CK_ULONG i = 0; i < n; i++) {
		CK_ULONG len;
		const void *v = attribute(o, tmpl[i].type, &len);
		CK_RV r = put(&tmpl[i], v, len);
		if (r != CKR_OK) rv = r;
	}
	return rv;
}
static CK_RV tC_GetAttributeValue(CK_SESSION_HANDLE h, CK_OBJECT_HANDLE o, CK_ATTRIBUTE_PTR t, CK_ULONG n) { LOCKED(getattr_(h, o, t, n)); }

static CK_RV signinit_(CK_SESSION_HANDLE h, CK_MECHANISM_PTR m, CK_OBJECT_HANDLE key) {
	OPEN_SESSION(s, h);
	if (s->signing) return CKR_OPERATION_ACTIVE;
	if (!logged_in) return CKR_USER_NOT_LOGGED_IN;
	if (key != H_PRIV) return CKR_KEY_HANDLE_INVALID;
	if (!m || !offered(m->mechanism) || m->mechanism == CKM_GOSTR3411_2012_256 || m->mechanism == CKM_GOSTR3411_2012_512)
		return CKR_MECHANISM_INVALID;
	s->signing = 1;
	s->sign_mech = m->mechanism;
	return CKR_OK;
}
static CK_RV tC_SignInit(CK_SESSION_HANDLE h, CK_MECHANISM_PTR m, CK_OBJECT_HANDLE key) { LOCKED(signinit_(h, m, key)); }

static CK_RV sign_(CK_SESSION_HANDLE h, CK_BYTE_PTR data, CK_ULONG len, CK_BYTE_PTR out, CK_ULONG_PTR outlen) {
	OPEN_SESSION(s, h);
	if (!s->signing) return CKR_OPERATION_NOT_INITIALIZED;
	size_t n = bits / 8;
	CK_ULONG want = 2 * n;
	int shortsig = fault("short-signature", NULL, 0);
	if (shortsig) want--;
	ANSWER_LENGTH(out, outlen, want);
	s->signing = 0;
	char delay[32];
	if (fault("delay", delay, sizeof delay)) {
		struct timespec ts = {atoi(delay) / 1000, (atoi(delay) % 1000) * 1000000L};
		nanosleep(&ts, NULL);
	}
	unsigned char hash[64];
	gnutls_digest_algorithm_t dalg = bits == 512 ? GNUTLS_DIG_STREEBOG_512 : GNUTLS_DIG_STREEBOG_256;
	if (s->sign_mech == CKM_GOSTR3410 || s->sign_mech == CKM_GOSTR3410_512) {
		if (len != n) return CKR_DATA_LEN_RANGE;
		memcpy(hash, data, n);
	} else if (gnutls_hash_fast(dalg, data, len, hash) < 0) {
		return CKR_FUNCTION_FAILED;
	}
	gnutls_datum_t hd = {hash, (unsigned)n}, sig;
	if (gnutls_privkey_sign_hash2(priv, bits == 512 ? GNUTLS_SIGN_GOST_512 : GNUTLS_SIGN_GOST_256, 0, &hd, &sig) < 0)
		return CKR_FUNCTION_FAILED;
	if (sig.size != 2 * n) {
		gnutls_free(sig.data);
		return CKR_FUNCTION_FAILED;
	}
	memcpy(out, sig.data, want);
	*outlen = want;
	gnutls_free(sig.data);
	return CKR_OK;
}
static CK_RV tC_Sign(CK_SESSION_HANDLE h, CK_BYTE_PTR d, CK_ULONG l, CK_BYTE_PTR o, CK_ULONG_PTR ol) { LOCKED(sign_(h, d, l, o, ol)); }

static CK_RV diginit_(CK_SESSION_HANDLE h, CK_MECHANISM_PTR m) {
	OPEN_SESSION(s, h);
	if (s->dig) return CKR_OPERATION_ACTIVE;
	if (!m || (m->mechanism != CKM_GOSTR3411_2012_256 && m->mechanism != CKM_GOSTR3411_2012_512) || !offered(m->mechanism))
		return CKR_MECHANISM_INVALID;
	s->digest_bits = m->mechanism == CKM_GOSTR3411_2012_512 ? 512 : 256;
	if (gnutls_hash_init(&s->dig, s->digest_bits == 512 ? GNUTLS_DIG_STREEBOG_512 : GNUTLS_DIG_STREEBOG_256) < 0) {
		s->dig = NULL;
		return CKR_FUNCTION_FAILED;
	}
	return CKR_OK;
}
static CK_RV tC_DigestInit(CK_SESSION_HANDLE h, CK_MECHANISM_PTR m) { LOCKED(diginit_(h, m)); }

static void digest_end(struct session *s) {
	gnutls_hash_deinit(s->dig, NULL);
	s->dig = NULL;
}

static CK_RV digupdate_(CK_SESSION_HANDLE h, CK_BYTE_PTR data, CK_ULONG len) {
	OPEN_SESSION(s, h);
	if (!s->dig) return CKR_OPERATION_NOT_INITIALIZED;
	if (fault("digest-fail", NULL, 0)) {
		digest_end(s);
		return CKR_FUNCTION_FAILED;
	}
	gnutls_hash(s->dig, data, len);
	return CKR_OK;
}
static CK_RV tC_DigestUpdate(CK_SESSION_HANDLE h, CK_BYTE_PTR d, CK_ULONG l) { LOCKED(digupdate_(h, d, l)); }

static CK_RV digfinal_(CK_SESSION_HANDLE h, CK_BYTE_PTR out, CK_ULONG_PTR outlen) {
	OPEN_SESSION(s, h);
	if (!s->dig) return CKR_OPERATION_NOT_INITIALIZED;
	CK_ULONG n = s->digest_bits / 8;
	ANSWER_LENGTH(out, outlen, n);
	gnutls_hash_output(s->dig, out);
	*outlen = n;
	digest_end(s);
	return CKR_OK;
}
static CK_RV tC_DigestFinal(CK_SESSION_HANDLE h, CK_BYTE_PTR o, CK_ULONG_PTR ol) { LOCKED(digfinal_(h, o, ol)); }

static CK_RV digest_(CK_SESSION_HANDLE h, CK_BYTE_PTR data, CK_ULONG len, CK_BYTE_PTR out, CK_ULONG_PTR outlen) {
	OPEN_SESSION(s, h);
	if (!s->dig) return CKR_OPERATION_NOT_INITIALIZED;
	CK_ULONG n = s->digest_bits / 8;
	ANSWER_LENGTH(out, outlen, n);
	if (fault("digest-fail", NULL, 0)) {
		digest_end(s);
		return CKR_FUNCTION_FAILED;
	}
	gnutls_hash(s->dig, data, len);
	gnutls_hash_output(s->dig, out);
	*outlen = n;
	digest_end(s);
	return CKR_OK;
}
static CK_RV tC_Digest(CK_SESSION_HANDLE h, CK_BYTE_PTR d, CK_ULONG l, CK_BYTE_PTR o, CK_ULONG_PTR ol) { LOCKED(digest_(h, d, l, o, ol)); }

#include "gostkeyx.c"

static CK_RV not_supported() { return CKR_FUNCTION_NOT_SUPPORTED; }

static CK_FUNCTION_LIST functions = {
	.version = {2, 40},
	.C_Initialize = tC_Initialize,
	.C_Finalize = tC_Finalize,
	.C_GetInfo = tC_GetInfo,
	.C_GetSlotList = tC_GetSlotList,
	.C_GetSlotInfo = tC_GetSlotInfo,
	.C_GetTokenInfo = tC_GetTokenInfo,
	.C_GetMechanismList = tC_GetMechanismList,
	.C_GetMechanismInfo = tC_GetMechanismInfo,
	.C_OpenSession = tC_OpenSession,
	.C_CloseSession = tC_CloseSession,
	.C_CloseAllSessions = tC_CloseAllSessions,
	.C_GetSessionInfo = tC_GetSessionInfo,
	.C_Login = tC_Login,
	.C_Logout = tC_Logout,
	.C_GetAttributeValue = tC_GetAttributeValue,
	.C_FindObjectsInit = tC_FindObjectsInit,
	.C_FindObjects = tC_FindObjects,
	.C_FindObjectsFinal = tC_FindObjectsFinal,
	.C_DigestInit = tC_DigestInit,
	.C_Digest = tC_Digest,
	.C_DigestUpdate = tC_DigestUpdate,
	.C_DigestFinal = tC_DigestFinal,
	.C_SignInit = tC_SignInit,
	.C_Sign = tC_Sign,
	.C_DeriveKey = tC_DeriveKey,
	.C_UnwrapKey = tC_UnwrapKey,
	.C_DecryptInit = tC_DecryptInit,
	.C_Decrypt = tC_Decrypt,
	.C_DestroyObject = tC_DestroyObject,
};

CK_RV C_GetFunctionList(CK_FUNCTION_LIST_PTR_PTR list) {
	if (!list) return CKR_ARGUMENTS_BAD;
	/* Every function not written above answers CKR_FUNCTION_NOT_SUPPORTED. */
	void **p = (void **)&functions.C_Initialize;
	size_t n = (sizeof functions - offsetof(CK_FUNCTION_LIST, C_Initialize)) / sizeof(void *);
	for (size_t i = 0; i < n; i++)
		if (!p[i]) p[i] = (void *)not_supported;
	functions.C_GetFunctionList = C_GetFunctionList;
	*list = &functions;
	return CKR_OK;
}
