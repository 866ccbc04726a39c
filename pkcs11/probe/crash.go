package probe

/*
#include <signal.h>

// Give the crash signals back their default action, so that a module that
// crashes kills the probe child by the signal (which the parent reports),
// rather than the Go runtime turning it into a stack dump and exit 2.
static void default_crash_signals(void) {
	signal(SIGSEGV, SIG_DFL);
	signal(SIGBUS, SIG_DFL);
	signal(SIGILL, SIG_DFL);
	signal(SIGFPE, SIG_DFL);
	signal(SIGABRT, SIG_DFL);
}
*/
import "C"

func defaultCrashSignals() { C.default_crash_signals() }
