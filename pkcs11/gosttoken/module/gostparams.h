/*
 * gostparams.h: the PKCS#11 GOST key-agreement values and parameter
 * structures (TC26's vendor mechanisms and KDFs, CK_GOSTR3410_DERIVE_PARAMS
 * and CK_GOSTR3410_KEY_WRAP_PARAMS, 40 bytes each on LP64) that p11-kit's
 * pkcs11.h does not define: one copy for the test module (gostkeyx.c) and
 * the test driver (../testdata/driver.c). The product's side lays out its
 * own in pkcs11/gostparams.go, so the two are still written independently.
 * Include after a pkcs11.h.
 */
#ifndef GOSTPARAMS_H
#define GOSTPARAMS_H

#ifndef CKM_GOSTR3410_12_DERIVE
#define CKM_GOSTR3410_12_DERIVE 0xD4321007UL
#endif
#ifndef CKM_KDF_4357
#define CKM_KDF_4357 0xD4321025UL
#endif
#define CKD_KDF_4357 0xD4321025UL
#define CKD_KDF_GOSTR3411_2012_256 0xD4321026UL

struct derive_params {
	CK_ULONG kdf;
	CK_BYTE_PTR pub;
	CK_ULONG publen;
	CK_BYTE_PTR ukm;
	CK_ULONG ukmlen;
};
struct keywrap_params {
	CK_BYTE_PTR wrapoid;
	CK_ULONG wrapoidlen;
	CK_BYTE_PTR ukm;
	CK_ULONG ukmlen;
	CK_OBJECT_HANDLE key;
};

#endif
