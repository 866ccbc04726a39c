package gostkeyx

/*
#include <stdlib.h>

// The TC26 mechanism parameters a GOST certificate login passes, as the
// platform's C compiler lays them out (CK_ULONG is unsigned long, a
// pointer a pointer: 40 bytes on LP64). miekg/pkcs11 copies a parameter's
// bytes into C memory; the pointers inside must point to C memory too,
// which cgo requires anyway.
typedef struct {
	unsigned long kdf;
	unsigned char *pPublicData;
	unsigned long ulPublicDataLen;
	unsigned char *pUKM;
	unsigned long ulUKMLen;
} sa_gostr3410_derive_params;

typedef struct {
	unsigned char *pWrapOID;
	unsigned long ulWrapOIDLen;
	unsigned char *pUKM;
	unsigned long ulUKMLen;
	unsigned long hKey;
} sa_gostr3410_key_wrap_params;
*/
import "C"

import "unsafe"

// cParams holds the C memory a mechanism's parameter points into; free it
// once the call that uses the parameter has returned.
type cParams struct{ ptrs []unsafe.Pointer }

func (c *cParams) bytes(b []byte) *C.uchar {
	p := C.CBytes(b)
	c.ptrs = append(c.ptrs, p)
	return (*C.uchar)(p)
}

func (c *cParams) free() {
	for _, p := range c.ptrs {
		C.free(p)
	}
	c.ptrs = nil
}

// gostDeriveParams is CK_GOSTR3410_DERIVE_PARAMS: the kdf, the peer's
// public key value (x then y, little-endian) and the UKM.
func (c *cParams) gostDeriveParams(kdf uint, public, ukm []byte) []byte {
	var s C.sa_gostr3410_derive_params
	s.kdf = C.ulong(kdf)
	s.pPublicData, s.ulPublicDataLen = c.bytes(public), C.ulong(len(public))
	s.pUKM, s.ulUKMLen = c.bytes(ukm), C.ulong(len(ukm))
	return C.GoBytes(unsafe.Pointer(&s), C.int(unsafe.Sizeof(s)))
}

// gostKeyWrapParams is CK_GOSTR3410_KEY_WRAP_PARAMS for C_UnwrapKey: no
// wrap OID, the UKM the token compares with the one inside, the
// recipient's private key.
func (c *cParams) gostKeyWrapParams(ukm []byte, key uint) []byte {
	var s C.sa_gostr3410_key_wrap_params
	s.pUKM, s.ulUKMLen = c.bytes(ukm), C.ulong(len(ukm))
	s.hKey = C.ulong(key)
	return C.GoBytes(unsafe.Pointer(&s), C.int(unsafe.Sizeof(s)))
}
