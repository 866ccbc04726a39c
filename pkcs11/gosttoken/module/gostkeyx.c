/*
 * gostkeyx.c: the key agreement half of gosttoken.c, which includes it (so
 * it shares that file's state: the key, the sessions, the faults). A GOST
 * certificate login's challenge is a CryptoPro key transport (RFC 4490):
 * VKO GOST R 34.10-2012 (RFC 7836), the CryptoPro KEK diversification
 * (RFC 4357 6.5), the GOST 28147-89 key unwrap with its IMIT (RFC 4357
 * 6.2) and the content in GOST 28147-89 CFB with CryptoPro key meshing.
 * GnuTLS's public API has none of these, so they are done with libgcrypt
 * (LGPL); GnuTLS still loads the key, and hands over its scalar.
 *
 * Every key made here is a session object: sensitive, never extractable,
 * gone with its session, at C_DestroyObject or C_Finalize. After each key
 * made or destroyed the module writes the number of live ones to the file
 * "objects" of the token's directory, so tests can prove that every path
 * destroys what it made (a test aid; no real token does this).
 */
#include <gcrypt.h>
#include <stdint.h>

#include "gostparams.h"

#define MAX_KEYS 64
#define H_SECRET 0x100 /* secret key i has handle H_SECRET + i */

/* The GOST 28147-89 S-boxes libgcrypt knows, by the OID it names them with. */
static const char *const sboxes[] = {
	"1.2.643.2.2.31.1", "1.2.643.2.2.31.2", "1.2.643.2.2.31.3", "1.2.643.2.2.31.4", /* CryptoPro-A..D */
	"1.2.643.7.1.2.5.1.1",                                                          /* TC26-Z */
};

struct skey {
	int live, session;
	unsigned char val[32];
	const char *sbox;
	CK_BBOOL unwrap, decrypt, derive;
};
static struct skey skeys[MAX_KEYS];
static struct {
	int active, key;
	unsigned char iv[8];
} decs[MAX_SESSIONS];
static unsigned char privd[64]; /* the private scalar, big-endian */
static size_t privd_len;
static char curve_name[64]; /* the curve's OID, which libgcrypt takes as its name */

/* sbox_of returns the S-box named by the DER OID in der, or NULL. */
static const char *sbox_of(const unsigned char *der, size_t len) {
	for (size_t i = 0; i < sizeof sboxes / sizeof sboxes[0]; i++) {
		unsigned char want[32];
		size_t wl = oid_der(sboxes[i], want);
		if (wl == len && memcmp(der, want, len) == 0) return sboxes[i];
	}
	return NULL;
}

static void count_objects(void) {
	int n = 0;
	for (int i = 0; i < MAX_KEYS; i++) n += skeys[i].live;
	FILE *f = fopen(path("objects"), "w");
	if (f) {
		fprintf(f, "%d\n", n);
		fclose(f);
	}
}

static int kx_load(gnutls_privkey_t key) {
	if (!gcry_control(GCRYCTL_INITIALIZATION_FINISHED_P)) {
		gcry_check_version(NULL);
		gcry_control(GCRYCTL_DISABLE_SECMEM, 0);
		gcry_control(GCRYCTL_INITIALIZATION_FINISHED, 0);
	}
	gnutls_ecc_curve_t curve;
	gnutls_digest_algorithm_t dg;
	gnutls_gost_paramset_t ps;
	gnutls_datum_t x, y, k;
	if (gnutls_privkey_export_gost_raw2(key, &curve, &dg, &ps, &x, &y, &k, 0) < 0) return -1;
	gnutls_free(x.data);
	gnutls_free(y.data);
	/* GnuTLS gives k least significant byte first, as it does x and y. */
	size_t n = bits / 8;
	int ok = k.size <= n && k.size <= sizeof privd;
	if (ok) {
		memset(privd, 0, sizeof privd);
		for (size_t i = 0; i < k.size; i++) privd[n - 1 - i] = k.data[i];
		privd_len = n;
	}
	gnutls_memset(k.data, 0, k.size);
	gnutls_free(k.data);
	snprintf(curve_name, sizeof curve_name, "%s", gnutls_ecc_curve_get_oid(curve));
	count_objects(); /* none yet */
	return ok ? 0 : -1;
}

/* The mechanisms this half offers, with the faults that take them away. */
static int kx_mechanisms(CK_MECHANISM_TYPE *out) {
	int n = 0;
	if (fault("raw-mechanism-only", NULL, 0)) return 0; /* as OpenSC: no GOST key agreement */
#ifdef ONE_STEP_UNWRAP
	if (!fault("no-unwrap-mechanism", NULL, 0)) out[n++] = CKM_GOSTR3410_KEY_WRAP;
#else
	if (!fault("no-derive", NULL, 0)) out[n++] = CKM_GOSTR3410_12_DERIVE;
	if (!fault("no-kdf4357", NULL, 0)) out[n++] = CKM_KDF_4357;
	if (!fault("no-unwrap-mechanism", NULL, 0)) out[n++] = CKM_GOST28147_KEY_WRAP;
#endif
	if (!fault("no-decrypt", NULL, 0)) out[n++] = CKM_GOST28147;
	return n;
}

static int kx_offered(CK_MECHANISM_TYPE m) {
	CK_MECHANISM_TYPE list[8];
	int n = kx_mechanisms(list);
	for (int i = 0; i < n; i++)
		if (list[i] == m) return 1;
	return 0;
}

static CK_FLAGS kx_flags(CK_MECHANISM_TYPE m) {
	switch (m) {
	case CKM_GOSTR3410_12_DERIVE:
	case CKM_KDF_4357:
		return CKF_DERIVE;
	case CKM_GOST28147_KEY_WRAP:
	case CKM_GOSTR3410_KEY_WRAP:
		return CKF_UNWRAP;
	case CKM_GOST28147:
		return CKF_DECRYPT;
	}
	return 0;
}

/* kdf_allowed: both KDFs, unless the fault kdf=NAME[,NAME] names the ones this "card" has. */
static int kdf_allowed(CK_ULONG kdf) {
	char v[128];
	const char *name = kdf == CKD_KDF_GOSTR3411_2012_256 ? "2012-256" : kdf == CKD_KDF_4357 ? "4357" : NULL;
	if (!name) return 0;
	if (!fault("kdf", v, sizeof v)) return 1;
	for (char *save, *p = strtok_r(v, ",", &save); p; p = strtok_r(NULL, ",", &save))
		if (strcmp(p, name) == 0) return 1;
	return 0;
}

static struct skey *skey(CK_OBJECT_HANDLE h) {
	if (h < H_SECRET || h >= H_SECRET + MAX_KEYS || !skeys[h - H_SECRET].live) return NULL;
	return &skeys[h - H_SECRET];
}

static void destroy(struct skey *k) {
	gnutls_memset(k, 0, sizeof *k);
}

/* kx_close_session destroys the keys session i made and ends its decryption. */
static void kx_close_session(int i) {
	int n = 0;
	for (int j = 0; j < MAX_KEYS; j++) {
		if (skeys[j].live && skeys[j].session == i) {
			destroy(&skeys[j]);
			n++;
		}
	}
	memset(&decs[i], 0, sizeof decs[i]);
	if (n) count_objects();
}

static void kx_finalize(void) {
	for (int j = 0; j < MAX_KEYS; j++) destroy(&skeys[j]);
	memset(decs, 0, sizeof decs);
	gnutls_memset(privd, 0, sizeof privd);
	count_objects();
}

/* What a template for a new GOST 28147 key may say. */
struct tmpl {
	const char *sbox; /* NULL when the template names none */
	CK_BBOOL unwrap, decrypt, derive;
};

static CK_RV bool_of(CK_ATTRIBUTE_PTR a, CK_BBOOL *b) {
	if (!a->pValue || a->ulValueLen != sizeof(CK_BBOOL)) return CKR_ATTRIBUTE_VALUE_INVALID;
	*b = *(CK_BBOOL *)a->pValue;
	return CKR_OK;
}

static CK_RV parse_template(CK_ATTRIBUTE_PTR t, CK_ULONG n, struct tmpl *out) {
	out->sbox = NULL;
	out->unwrap = out->decrypt = out->derive = CK_TRUE;
	if (n && !t) return CKR_ARGUMENTS_BAD;
	for (CK_ULONG i = 0; i < n; i++) {
		CK_ATTRIBUTE_PTR a = &t[i];
		CK_BBOOL b;
		CK_RV rv;
		switch (a->type) {
		case CKA_CLASS:
		case CKA_KEY_TYPE:
			if (!a->pValue || a->ulValueLen != sizeof(CK_ULONG)) return CKR_ATTRIBUTE_VALUE_INVALID;
			if (*(CK_ULONG *)a->pValue != (a->type == CKA_CLASS ? CKO_SECRET_KEY : CKK_GOST28147))
				return CKR_TEMPLATE_INCONSISTENT;
			break;
		case CKA_GOST28147_PARAMS:
			if (!a->pValue || !(out->sbox = sbox_of(a->pValue, a->ulValueLen))) return CKR_ATTRIBUTE_VALUE_INVALID;
			break;
		case CKA_TOKEN:      /* this token makes session keys only */
		case CKA_EXTRACTABLE: /* and never lets them out */
		case CKA_SENSITIVE:
			if ((rv = bool_of(a, &b)) != CKR_OK) return rv;
			if (b != (a->type == CKA_SENSITIVE)) return CKR_TEMPLATE_INCONSISTENT;
			break;
		case CKA_PRIVATE:
		case CKA_ENCRYPT:
		case CKA_WRAP:
			if ((rv = bool_of(a, &b)) != CKR_OK) return rv;
			break;
		case CKA_UNWRAP:
			if ((rv = bool_of(a, &out->unwrap)) != CKR_OK) return rv;
			break;
		case CKA_DECRYPT:
			if ((rv = bool_of(a, &out->decrypt)) != CKR_OK) return rv;
			break;
		case CKA_DERIVE:
			if ((rv = bool_of(a, &out->derive)) != CKR_OK) return rv;
			break;
		default:
			return CKR_ATTRIBUTE_TYPE_INVALID;
		}
	}
	return CKR_OK;
}

/* new_key stores val as a session key of session s with the template's attributes. */
static CK_RV new_key(struct session *s, const unsigned char val[32], const struct tmpl *t, CK_OBJECT_HANDLE_PTR out) {
	for (int i = 0; i < MAX_KEYS; i++) {
		struct skey *k = &skeys[i];
		if (k->live) continue;
		k->live = 1;
		k->session = (int)(s - sessions);
		memcpy(k->val, val, 32);
		k->sbox = t->sbox;
		k->unwrap = t->unwrap;
		k->decrypt = t->decrypt;
		k->derive = t->derive;
		*out = H_SECRET + i;
		count_objects();
		return CKR_OK;
	}
	return CKR_DEVICE_MEMORY;
}

/* le_mpi reads n bytes, least significant first. */
static gcry_mpi_t le_mpi(const unsigned char *le, size_t n) {
	unsigned char be[128];
	gcry_mpi_t m = NULL;
	for (size_t i = 0; i < n; i++) be[i] = le[n - 1 - i];
	gcry_mpi_scan(&m, GCRYMPI_FMT_USG, be, n, NULL);
	return m;
}

/* mpi_le writes m in n bytes, least significant first. */
static int mpi_le(gcry_mpi_t m, unsigned char *le, size_t n) {
	unsigned char be[128];
	size_t w = 0;
	if (gcry_mpi_print(GCRYMPI_FMT_USG, be, sizeof be, &w, m) || w > n) return -1;
	memset(le, 0, n);
	for (size_t i = 0; i < w; i++) le[i] = be[w - 1 - i];
	return 0;
}

/*
 * vko computes KEK = VKO_GOSTR3410_2012_256(d, peer, ukm) (RFC 7836 4.3.1):
 * Streebog-256 of K = (h·u·d mod q)·P, x then y, each little-endian; for
 * 512-bit keys too, as OpenSSL's gost engine and CryptoPro do. The peer's
 * point, x||y little-endian, must lie on the key's curve.
 */
static CK_RV vko(const unsigned char *peer, size_t len, const unsigned char ukm[8], unsigned char kek[32]) {
	size_t n = bits / 8;
	if (len != 2 * n) return CKR_MECHANISM_PARAM_INVALID;
	gcry_ctx_t ctx;
	if (gcry_mpi_ec_new(&ctx, NULL, curve_name)) return CKR_DEVICE_ERROR;
	CK_RV rv = CKR_MECHANISM_PARAM_INVALID;
	gcry_mpi_t x = le_mpi(peer, n), y = le_mpi(peer + n, n), p = gcry_mpi_ec_get_mpi("p", ctx, 1);
	gcry_mpi_t q = gcry_mpi_ec_get_mpi("n", ctx, 1), h = gcry_mpi_ec_get_mpi("h", ctx, 1);
	gcry_mpi_t u = le_mpi(ukm, 8), d = NULL, t = gcry_mpi_new(0), ax = gcry_mpi_new(0), ay = gcry_mpi_new(0);
	gcry_mpi_point_t P = NULL, K = gcry_mpi_point_new(0);
	unsigned char xy[128];
	gcry_mpi_scan(&d, GCRYMPI_FMT_USG, privd, privd_len, NULL);
	if (!x || !y || !p || !q || !u || !d) {
		rv = CKR_DEVICE_ERROR;
		goto out;
	}
	if (gcry_mpi_cmp(x, p) >= 0 || gcry_mpi_cmp(y, p) >= 0) goto out;
	P = gcry_mpi_point_set(NULL, x, y, GCRYMPI_CONST_ONE);
	if (!gcry_mpi_ec_curve_point(P, ctx)) goto out;
	if (gcry_mpi_cmp_ui(u, 0) == 0) gcry_mpi_set_ui(u, 1); /* RFC 7836: a zero UKM counts as 1 */
	gcry_mpi_mul(t, u, d);
	if (h) gcry_mpi_mul(t, t, h);
	gcry_mpi_mod(t, t, q);
	gcry_mpi_ec_mul(K, t, P, ctx);
	if (gcry_mpi_ec_get_affine(ax, ay, K, ctx)) goto out; /* the point at infinity */
	if (mpi_le(ax, xy, n) || mpi_le(ay, xy + n, n)) {
		rv = CKR_DEVICE_ERROR;
		goto out;
	}
	gcry_md_hash_buffer(GCRY_MD_STRIBOG256, kek, xy, 2 * n);
	rv = CKR_OK;
out:
	gnutls_memset(xy, 0, sizeof xy);
	gcry_mpi_release(x), gcry_mpi_release(y), gcry_mpi_release(p), gcry_mpi_release(q), gcry_mpi_release(h);
	gcry_mpi_release(u), gcry_mpi_release(d), gcry_mpi_release(t), gcry_mpi_release(ax), gcry_mpi_release(ay);
	gcry_mpi_point_release(P), gcry_mpi_point_release(K);
	gcry_ctx_release(ctx);
	return rv;
}

/* gost_op runs GOST 28147-89 with S-box sbox and key key over buf in place. */
static int gost_op(int algo, int mode, int enc, const char *sbox, const unsigned char key[32],
		   const unsigned char *iv, unsigned char *buf, size_t len) {
	gcry_cipher_hd_t c;
	if (gcry_cipher_open(&c, algo, mode, 0)) return -1;
	int bad = gcry_cipher_ctl(c, GCRYCTL_SET_SBOX, (void *)sbox, 0) || gcry_cipher_setkey(c, key, 32) ||
		  (iv && gcry_cipher_setiv(c, iv, 8)) ||
		  (enc ? gcry_cipher_encrypt(c, buf, len, NULL, 0) : gcry_cipher_decrypt(c, buf, len, NULL, 0));
	gcry_cipher_close(c);
	return bad ? -1 : 0;
}

/*
 * diversify is RFC 4357 6.5, the CryptoPro KEK diversification: eight
 * rounds, each encrypting the key with itself in CFB under an IV made of
 * the sums of its 32-bit words chosen by the bits of one UKM byte.
 */
static int diversify(const unsigned char kek[32], const unsigned char ukm[8], const char *sbox, unsigned char out[32]) {
	memmove(out, kek, 32);
	for (int i = 0; i < 8; i++) {
		uint32_t s1 = 0, s2 = 0;
		for (int j = 0; j < 8; j++) {
			uint32_t w = out[4 * j] | (uint32_t)out[4 * j + 1] << 8 | (uint32_t)out[4 * j + 2] << 16 | (uint32_t)out[4 * j + 3] << 24;
			if (ukm[i] >> j & 1)
				s1 += w;
			else
				s2 += w;
		}
		unsigned char iv[8], key[32];
		for (int b = 0; b < 4; b++) {
			iv[b] = s1 >> (8 * b);
			iv[4 + b] = s2 >> (8 * b);
		}
		memcpy(key, out, 32);
		int bad = gost_op(GCRY_CIPHER_GOST28147, GCRY_CIPHER_MODE_CFB, 1, sbox, key, iv, out, 32);
		gnutls_memset(key, 0, sizeof key);
		if (bad) return -1;
	}
	return 0;
}

/*
 * unwrap is RFC 4357 6.2 without diversification, CKM_GOST28147_KEY_WRAP's
 * semantics: CEK = ECB-decrypt(KEK, 32 bytes), then its IMIT under KEK
 * with IV = ukm must equal the 4 bytes that follow.
 */
static CK_RV unwrap(const unsigned char kek[32], const char *sbox, const unsigned char ukm[8],
		    const unsigned char wrapped[36], unsigned char cek[32]) {
	memcpy(cek, wrapped, 32);
	if (gost_op(GCRY_CIPHER_GOST28147, GCRY_CIPHER_MODE_ECB, 0, sbox, kek, NULL, cek, 32)) return CKR_DEVICE_ERROR;
	gcry_mac_hd_t m;
	unsigned char mac[4];
	size_t ml = sizeof mac;
	if (gcry_mac_open(&m, GCRY_MAC_GOST28147_IMIT, 0, NULL)) return CKR_DEVICE_ERROR;
	int bad = gcry_mac_ctl(m, GCRYCTL_SET_SBOX, (void *)sbox, strlen(sbox)) || gcry_mac_setkey(m, kek, 32) ||
		  gcry_mac_setiv(m, ukm, 8) || gcry_mac_write(m, cek, 32) || gcry_mac_read(m, mac, &ml);
	gcry_mac_close(m);
	if (bad || ml != 4) return CKR_DEVICE_ERROR;
	if (memcmp(mac, wrapped + 32, 4) != 0 || fault("bad-mac", NULL, 0)) {
		gnutls_memset(cek, 0, 32);
		return CKR_WRAPPED_KEY_INVALID;
	}
	return CKR_OK;
}

static CK_RV derive_(CK_SESSION_HANDLE h, CK_MECHANISM_PTR m, CK_OBJECT_HANDLE base, CK_ATTRIBUTE_PTR t, CK_ULONG n, CK_OBJECT_HANDLE_PTR out) {
	OPEN_SESSION(s, h);
	if (!m || !out) return CKR_ARGUMENTS_BAD;
	if (kx_flags(m->mechanism) != CKF_DERIVE || !kx_offered(m->mechanism)) return CKR_MECHANISM_INVALID;
	struct tmpl tp;
	CK_RV rv = parse_template(t, n, &tp);
	if (rv != CKR_OK) return rv;
	unsigned char kek[32];
	if (m->mechanism == CKM_KDF_4357) {
		struct skey *k = skey(base);
		if (!k) return CKR_KEY_HANDLE_INVALID;
		if (!k->derive) return CKR_KEY_FUNCTION_NOT_PERMITTED;
		if (!m->pParameter || m->ulParameterLen != 8) return CKR_MECHANISM_PARAM_INVALID;
		if (!tp.sbox) tp.sbox = k->sbox;
		if (diversify(k->val, m->pParameter, k->sbox, kek)) return CKR_DEVICE_ERROR;
	} else {
		if (!logged_in) return CKR_USER_NOT_LOGGED_IN;
		if (base != H_PRIV) return base == H_PUB || base == H_CERT || skey(base) ? CKR_KEY_TYPE_INCONSISTENT : CKR_KEY_HANDLE_INVALID;
		if (fault("no-derive-attr", NULL, 0)) return CKR_KEY_FUNCTION_NOT_PERMITTED;
		struct derive_params *p = m->pParameter;
		if (!p || m->ulParameterLen != sizeof *p || !kdf_allowed(p->kdf)) return CKR_MECHANISM_PARAM_INVALID;
		if (!p->ukm || p->ukmlen != 8 || !p->pub) return CKR_MECHANISM_PARAM_INVALID;
		if (!tp.sbox) return CKR_TEMPLATE_INCOMPLETE;
		if ((rv = vko(p->pub, p->publen, p->ukm, kek)) != CKR_OK) return rv;
		if (p->kdf == CKD_KDF_4357 && diversify(kek, p->ukm, tp.sbox, kek)) rv = CKR_DEVICE_ERROR;
	}
	if (rv == CKR_OK) rv = new_key(s, kek, &tp, out);
	gnutls_memset(kek, 0, sizeof kek);
	return rv;
}
static CK_RV tC_DeriveKey(CK_SESSION_HANDLE h, CK_MECHANISM_PTR m, CK_OBJECT_HANDLE base, CK_ATTRIBUTE_PTR t, CK_ULONG n, CK_OBJECT_HANDLE_PTR out) {
	LOCKED(derive_(h, m, base, t, n, out));
}

/* der_next takes the next TLV of d, which must have tag, into v: strict DER, lengths up to 65535. */
struct der {
	const unsigned char *p;
	size_t n;
};
static int der_next(struct der *d, unsigned char tag, struct der *v) {
	if (d->n < 2 || d->p[0] != tag) return -1;
	size_t len = d->p[1], hl = 2;
	if (len == 0x81) {
		if (d->n < 3 || d->p[2] < 0x80) return -1;
		len = d->p[2], hl = 3;
	} else if (len == 0x82) {
		if (d->n < 4 || d->p[2] == 0) return -1;
		len = (size_t)d->p[2] << 8 | d->p[3], hl = 4;
	} else if (len >= 0x80) { /* 0x80: indefinite; longer lengths are not met here */
		return -1;
	}
	if (d->n - hl < len) return -1;
	v->p = d->p + hl, v->n = len;
	d->p += hl + len, d->n -= hl + len;
	return 0;
}

/* What a GostR3410-KeyTransport (RFC 4490 4.2.1) carries. */
struct transport {
	unsigned char wrapped[36]; /* encryptedKey || macKey */
	const char *sbox;          /* transportParameters.encryptionParamSet */
	const unsigned char *eph;  /* ephemeralPublicKey: x||y little-endian */
	size_t ephlen;
	unsigned char ukm[8];
};

/*
 * parse_transport reads der strictly: a 32-byte key, no maskKey, a 4-byte
 * MAC, the transport parameters with a known S-box, an ephemeral key of
 * this key's algorithm and size, an 8-byte UKM, and nothing more.
 */
static int parse_transport(const unsigned char *der, size_t len, struct transport *t) {
	struct der all = {der, len}, kt, sek, v, tp, spki, alg, bs, inner;
	if (der_next(&all, 0x30, &kt) || all.n) return -1;
	if (der_next(&kt, 0x30, &sek) || der_next(&sek, 0x04, &v) || v.n != 32) return -1;
	memcpy(t->wrapped, v.p, 32);
	if (der_next(&sek, 0x04, &v) || v.n != 4 || sek.n) return -1; /* a maskKey ([0]) fails here */
	memcpy(t->wrapped + 32, v.p, 4);
	if (der_next(&kt, 0xA0, &tp) || kt.n) return -1;
	if (der_next(&tp, 0x06, &v) || v.n > 30 || !(t->sbox = sbox_of(v.p - 2, v.n + 2))) return -1;
	if (der_next(&tp, 0xA0, &spki) || der_next(&spki, 0x30, &alg) || der_next(&alg, 0x06, &v)) return -1;
	unsigned char want[16];
	size_t wl = oid_der(bits == 512 ? "1.2.643.7.1.1.1.2" : "1.2.643.7.1.1.1.1", want);
	if (v.n + 2 != wl || memcmp(v.p - 2, want, wl) != 0) return -1;
	if (der_next(&spki, 0x03, &bs) || spki.n || bs.n < 1 || bs.p[0] != 0) return -1;
	inner.p = bs.p + 1, inner.n = bs.n - 1;
	if (der_next(&inner, 0x04, &v) || inner.n || v.n != (size_t)bits / 4) return -1;
	t->eph = v.p, t->ephlen = v.n;
	if (der_next(&tp, 0x04, &v) || v.n != 8 || tp.n) return -1;
	memcpy(t->ukm, v.p, 8);
	return 0;
}

static CK_RV unwrap_(CK_SESSION_HANDLE h, CK_MECHANISM_PTR m, CK_OBJECT_HANDLE key, CK_BYTE_PTR wrapped, CK_ULONG wlen,
		     CK_ATTRIBUTE_PTR t, CK_ULONG n, CK_OBJECT_HANDLE_PTR out) {
	OPEN_SESSION(s, h);
	if (!m || !out || (!wrapped && wlen)) return CKR_ARGUMENTS_BAD;
	if (kx_flags(m->mechanism) != CKF_UNWRAP || !kx_offered(m->mechanism)) return CKR_MECHANISM_INVALID;
	struct tmpl tp;
	CK_RV rv = parse_template(t, n, &tp);
	if (rv != CKR_OK) return rv;
	unsigned char kek[32], cek[32];
	if (m->mechanism == CKM_GOST28147_KEY_WRAP) {
		struct skey *k = skey(key);
		if (!k) return key == H_PRIV || key == H_PUB || key == H_CERT ? CKR_KEY_TYPE_INCONSISTENT : CKR_KEY_HANDLE_INVALID;
		if (!k->unwrap) return CKR_KEY_FUNCTION_NOT_PERMITTED;
		if (!m->pParameter || m->ulParameterLen != 8) return CKR_MECHANISM_PARAM_INVALID;
		if (wlen != 36) return CKR_WRAPPED_KEY_LEN_RANGE;
		if (!tp.sbox) return CKR_TEMPLATE_INCOMPLETE;
		rv = unwrap(k->val, k->sbox, m->pParameter, wrapped, cek);
	} else {
		/* CKM_GOSTR3410_KEY_WRAP: the whole RFC 4490 recipient step in one call. */
		if (!logged_in) return CKR_USER_NOT_LOGGED_IN;
		if (key != H_PRIV) return key == H_PUB || key == H_CERT || skey(key) ? CKR_KEY_TYPE_INCONSISTENT : CKR_KEY_HANDLE_INVALID;
		struct keywrap_params *p = m->pParameter;
		if (!p || m->ulParameterLen != sizeof *p || p->wrapoid || p->wrapoidlen) return CKR_MECHANISM_PARAM_INVALID;
		if (p->key != 0 && p->key != key) return CKR_MECHANISM_PARAM_INVALID;
		if (!tp.sbox) return CKR_TEMPLATE_INCOMPLETE;
		struct transport tr;
		if (parse_transport(wrapped, wlen, &tr)) return CKR_WRAPPED_KEY_INVALID;
		if (p->ukm && (p->ukmlen != 8 || memcmp(p->ukm, tr.ukm, 8) != 0)) return CKR_MECHANISM_PARAM_INVALID;
		if ((rv = vko(tr.eph, tr.ephlen, tr.ukm, kek)) != CKR_OK) return rv == CKR_MECHANISM_PARAM_INVALID ? CKR_WRAPPED_KEY_INVALID : rv;
		if (diversify(kek, tr.ukm, tr.sbox, kek))
			rv = CKR_DEVICE_ERROR;
		else
			rv = unwrap(kek, tr.sbox, tr.ukm, tr.wrapped, cek);
		gnutls_memset(kek, 0, sizeof kek);
	}
	if (rv == CKR_OK) rv = new_key(s, cek, &tp, out);
	gnutls_memset(cek, 0, sizeof cek);
	return rv;
}
static CK_RV tC_UnwrapKey(CK_SESSION_HANDLE h, CK_MECHANISM_PTR m, CK_OBJECT_HANDLE key, CK_BYTE_PTR w, CK_ULONG wl,
			  CK_ATTRIBUTE_PTR t, CK_ULONG n, CK_OBJECT_HANDLE_PTR out) {
	LOCKED(unwrap_(h, m, key, w, wl, t, n, out));
}

static CK_RV decinit_(CK_SESSION_HANDLE h, CK_MECHANISM_PTR m, CK_OBJECT_HANDLE key) {
	OPEN_SESSION(s, h);
	int i = (int)(s - sessions);
	if (decs[i].active) return CKR_OPERATION_ACTIVE;
	if (!m || m->mechanism != CKM_GOST28147 || !kx_offered(CKM_GOST28147)) return CKR_MECHANISM_INVALID;
	struct skey *k = skey(key);
	if (!k) return key == H_PRIV || key == H_PUB || key == H_CERT ? CKR_KEY_TYPE_INCONSISTENT : CKR_KEY_HANDLE_INVALID;
	if (!k->decrypt) return CKR_KEY_FUNCTION_NOT_PERMITTED;
	if (!m->pParameter || m->ulParameterLen != 8) return CKR_MECHANISM_PARAM_INVALID;
	decs[i].active = 1;
	decs[i].key = (int)key;
	memcpy(decs[i].iv, m->pParameter, 8);
	return CKR_OK;
}
static CK_RV tC_DecryptInit(CK_SESSION_HANDLE h, CK_MECHANISM_PTR m, CK_OBJECT_HANDLE key) { LOCKED(decinit_(h, m, key)); }

/* decrypt_ is single-part CFB with CryptoPro key meshing every 1024 bytes (RFC 4357 2.3.2). */
static CK_RV decrypt_(CK_SESSION_HANDLE h, CK_BYTE_PTR in, CK_ULONG len, CK_BYTE_PTR out, CK_ULONG_PTR outlen) {
	OPEN_SESSION(s, h);
	int i = (int)(s - sessions);
	if (!decs[i].active) return CKR_OPERATION_NOT_INITIALIZED;
	if (!outlen || (!in && len)) return CKR_ARGUMENTS_BAD;
	ANSWER_LENGTH(out, outlen, len);
	decs[i].active = 0;
	struct skey *k = skey(decs[i].key);
	if (!k) return CKR_KEY_HANDLE_INVALID; /* destroyed since C_DecryptInit */
	if (fault("decrypt-fail", NULL, 0)) return CKR_DEVICE_ERROR;
	memmove(out, in, len);
	if (gost_op(GCRY_CIPHER_GOST28147_MESH, GCRY_CIPHER_MODE_CFB, 0, k->sbox, k->val, decs[i].iv, out, len)) {
		gnutls_memset(out, 0, len);
		return CKR_DEVICE_ERROR;
	}
	*outlen = len;
	return CKR_OK;
}
static CK_RV tC_Decrypt(CK_SESSION_HANDLE h, CK_BYTE_PTR in, CK_ULONG len, CK_BYTE_PTR out, CK_ULONG_PTR outlen) {
	LOCKED(decrypt_(h, in, len, out, outlen));
}

static CK_RV destroy_(CK_SESSION_HANDLE h, CK_OBJECT_HANDLE o) {
	if (!sess(h)) return CKR_SESSION_HANDLE_INVALID;
	struct skey *k = skey(o);
	if (!k) return o == H_PRIV || o == H_PUB || o == H_CERT ? CKR_ACTION_PROHIBITED : CKR_OBJECT_HANDLE_INVALID;
	destroy(k);
	count_objects();
	return CKR_OK;
}
static CK_RV tC_DestroyObject(CK_SESSION_HANDLE h, CK_OBJECT_HANDLE o) { LOCKED(destroy_(h, o)); }

/* kx_getattr answers C_GetAttributeValue for a secret key; its value stays inside. */
static CK_RV kx_getattr(struct skey *k, CK_ATTRIBUTE_PTR tmpl, CK_ULONG n) {
	static const CK_BBOOL yes = CK_TRUE, no = CK_FALSE;
	static const CK_ULONG class = CKO_SECRET_KEY, type = CKK_GOST28147;
	CK_RV rv = CKR_OK;
	for (CK_ULONG i = 0; i < n; i++) {
		const void *v = NULL;
		CK_ULONG len = 1;
		unsigned char params[32];
		switch (tmpl[i].type) {
		case CKA_CLASS:
			v = &class, len = sizeof class;
			break;
		case CKA_KEY_TYPE:
			v = &type, len = sizeof type;
			break;
		case CKA_GOST28147_PARAMS:
			len = oid_der(k->sbox, params), v = params;
			break;
		case CKA_SENSITIVE:
		case CKA_ALWAYS_SENSITIVE:
		case CKA_NEVER_EXTRACTABLE:
			v = &yes;
			break;
		case CKA_TOKEN:
		case CKA_EXTRACTABLE:
		case CKA_LOCAL:
		case CKA_ENCRYPT:
		case CKA_WRAP:
			v = &no;
			break;
		case CKA_UNWRAP:
			v = k->unwrap ? &yes : &no;
			break;
		case CKA_DECRYPT:
			v = k->decrypt ? &yes : &no;
			break;
		case CKA_DERIVE:
			v = k->derive ? &yes : &no;
			break;
		case CKA_VALUE:
			tmpl[i].ulValueLen = CK_UNAVAILABLE_INFORMATION;
			rv = CKR_ATTRIBUTE_SENSITIVE;
			continue;
		}
		CK_RV r = put(&tmpl[i], v, len);
		if (r != CKR_OK) rv = r;
	}
	return rv;
}
