// Command rutoken-card is a Rutoken ECP for tests, behind the real reader
// stack: it connects to vsmartcard's vpcd reader driver (loaded by pcscd)
// as the card and answers the APDUs OpenSC's rutoken_ecp driver sends
// (package rutoken). Nothing ships it: the card rig (package pkcs11test)
// builds and starts it.
//
//	rutoken-card -state FILE [-serial HEX] [-port PORT] [-reader N]
//	             [-control PATH] [-delay MS] [-sign-delay MS]
//
// The state file (0600) keeps the card's files, PINs and keys across
// restarts; a missing one is a blank card, personalised by OpenSC's
// pkcs15-init. The control socket takes one line a connection (remove,
// insert, delay, signdelay, tries, pubkey, status, and the faults: fault
// select-key SW, fault remove-after-verify, fault clear; rutoken.Server).
// RUTOKEN_CARD_DEBUG=1 logs every APDU (PINs and key material
// hidden) and its answer to stderr. SIGTERM ends it.
package main

import (
	"context"
	"encoding/hex"
	"flag"
	"fmt"
	"log"
	"net"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/signagent/signagent/pkcs11/pkcs11test/rutoken"
)

// DebugEnv turns on the APDU log.
const DebugEnv = "RUTOKEN_CARD_DEBUG"

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "rutoken-card:", err)
		os.Exit(1)
	}
}

func run() error {
	state := flag.String("state", "", "the card's state `file` (0600; missing: a blank card)")
	serial := flag.String("serial", "", "set the card's serial number (`hex`, 1 to 16 bytes)")
	port := flag.Int("port", 35963, "vpcd's first reader's `port` on 127.0.0.1")
	reader := flag.Int("reader", 0, "the reader (0 or 1) the card starts in")
	control := flag.String("control", "", "the control socket's `path`")
	delay := flag.Int("delay", 0, "wait `MS` before every answer")
	signDelay := flag.Int("sign-delay", 0, "wait `MS` more before a signature's answer")
	flag.Parse()
	if *state == "" || *control == "" || flag.NArg() != 0 {
		return fmt.Errorf("usage: rutoken-card -state FILE -control PATH [flags]")
	}
	if *reader < 0 || *reader > 1 {
		return fmt.Errorf("-reader %d: vpcd has readers 0 and 1", *reader)
	}
	st, err := rutoken.LoadState(*state)
	if err != nil {
		return err
	}
	if *serial != "" {
		b, err := hex.DecodeString(*serial)
		if err != nil || len(b) == 0 || len(b) > 16 {
			return fmt.Errorf("-serial %q: 1 to 16 bytes in hex", *serial)
		}
		st.Serial = b
	}
	if len(st.Serial) == 0 {
		return fmt.Errorf("the card has no serial: give it one with -serial")
	}
	if err := rutoken.SaveState(*state, &st); err != nil {
		return err
	}
	card := rutoken.New(st, func(st *rutoken.State) error { return rutoken.SaveState(*state, st) })
	os.Remove(*control)
	ln, err := net.Listen("unix", *control)
	if err != nil {
		return err
	}
	defer os.Remove(*control)
	logger := log.New(os.Stderr, "rutoken-card ", log.Ltime|log.Lmicroseconds)
	s := rutoken.NewServer(card, *port, *reader, time.Duration(*delay)*time.Millisecond, time.Duration(*signDelay)*time.Millisecond, logger)
	s.LogAPDUs = os.Getenv(DebugEnv) == "1"
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	logger.Printf("serial %X, state %s", card.Serial(), *state)
	return s.Run(ctx, ln)
}
