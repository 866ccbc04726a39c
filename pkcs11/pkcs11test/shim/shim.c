/*
 * A PKCS#11 module for tests: it passes every call to a real module
 * (SHIM_REAL_MODULE) and misbehaves on request, for what a real token
 * cannot be made to do at a chosen moment:
 *   SHIM_HANG_FILE=F     C_Sign does not return while the file F exists
 *                        (a hung card); removing F lets it finish.
 *   SHIM_CRASH_INIT=1    C_Initialize crashes the process (SIGSEGV).
 *   SHIM_PINPAD_FILE=F   the token has a PIN pad: C_GetTokenInfo sets
 *                        CKF_PROTECTED_AUTHENTICATION_PATH, and C_Login
 *                        without a PIN (NULL) logs in with the PIN in F,
 *                        as if typed on the reader's keypad; each such
 *                        login appends a line to F.log.
 */
#include <dlfcn.h>
#include <stdio.h>
#include <string.h>
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

static CK_RV shim_get_token_info(CK_SLOT_ID slot, CK_TOKEN_INFO_PTR info) {
	CK_RV rv = real->C_GetTokenInfo(slot, info);
	if (rv == CKR_OK && getenv("SHIM_PINPAD_FILE") != NULL)
		info->flags |= CKF_PROTECTED_AUTHENTICATION_PATH;
	return rv;
}

static CK_RV shim_login(CK_SESSION_HANDLE s, CK_USER_TYPE who, CK_UTF8CHAR_PTR pin, CK_ULONG len) {
	const char *pad = getenv("SHIM_PINPAD_FILE");
	if (pad == NULL || pin != NULL)
		return real->C_Login(s, who, pin, len);
	char typed[256] = {0};
	FILE *f = fopen(pad, "r");
	if (f == NULL)
		return CKR_FUNCTION_CANCELED; /* nobody typed on the keypad */
	size_t n = fread(typed, 1, sizeof typed - 1, f);
	fclose(f);
	while (n > 0 && (typed[n - 1] == '\n' || typed[n - 1] == '\r'))
		typed[--n] = 0;
	char log[4096];
	snprintf(log, sizeof log, "%s.log", pad);
	FILE *l = fopen(log, "a");
	if (l != NULL) {
		fputs("login on the keypad\n", l);
		fclose(l);
	}
	return real->C_Login(s, who, (CK_UTF8CHAR_PTR)typed, n);
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
		ours.C_GetTokenInfo = shim_get_token_info;
		ours.C_Login = shim_login;
	}
	*list = &ours;
	return CKR_OK;
}
