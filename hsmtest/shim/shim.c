/*
 * A PKCS#11 module for tests: it passes every call to a real module
 * (SHIM_REAL_MODULE) and misbehaves on request, for what a real token
 * cannot be made to do at a chosen moment:
 *   SHIM_HANG_FILE=F     C_Sign does not return while the file F exists
 *                        (a hung card); removing F lets it finish.
 *   SHIM_CRASH_INIT=1    C_Initialize crashes the process (SIGSEGV).
 */
#include <dlfcn.h>
#include <signal.h>
#include <stdlib.h>
#include <unistd.h>
#include "pkcs11go.h"

static CK_FUNCTION_LIST_PTR real;
static CK_FUNCTION_LIST ours;

static CK_RV shim_sign(CK_SESSION_HANDLE s, CK_BYTE_PTR d, CK_ULONG n, CK_BYTE_PTR sig, CK_ULONG_PTR len) {
	const char *f = getenv("SHIM_HANG_FILE");
	while (f != NULL && access(f, F_OK) == 0)
		usleep(10000);
	return real->C_Sign(s, d, n, sig, len);
}

static CK_RV shim_initialize(CK_VOID_PTR args) {
	if (getenv("SHIM_CRASH_INIT") != NULL)
		raise(SIGSEGV);
	return real->C_Initialize(args);
}

CK_RV C_GetFunctionList(CK_FUNCTION_LIST_PTR_PTR list) {
	if (real == NULL) {
		const char *path = getenv("SHIM_REAL_MODULE");
		void *h = dlopen(path != NULL ? path : "/usr/lib/softhsm/libsofthsm2.so", RTLD_NOW | RTLD_LOCAL);
		if (h == NULL)
			return CKR_GENERAL_ERROR;
		CK_C_GetFunctionList get = (CK_C_GetFunctionList)dlsym(h, "C_GetFunctionList");
		if (get == NULL || get(&real) != CKR_OK)
			return CKR_GENERAL_ERROR;
		ours = *real;
		ours.C_Sign = shim_sign;
		ours.C_Initialize = shim_initialize;
	}
	*list = &ours;
	return CKR_OK;
}
