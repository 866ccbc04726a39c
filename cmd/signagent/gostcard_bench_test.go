package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/signagent/signagent/pkcs11/pkcs11test"
)

// BenchmarkGOSTCardAgent: signatures per second on the GOST card at
// native speed and at 300 ms per signature, by the card alone (OpenSC's
// pkcs11-tool, one signature per run, one after another) and through the
// agent (/v1/signatures, 12 callers), and their ratio, measured in the
// same run on the same card. Run with -benchtime=1x:
//
//	go test ./cmd/signagent -run '^$' -bench BenchmarkGOSTCardAgent -benchtime=1x
func BenchmarkGOSTCardAgent(b *testing.B) {
	for _, delay := range []time.Duration{0, 300 * time.Millisecond} {
		b.Run(map[time.Duration]string{0: "native", 300 * time.Millisecond: "300ms"}[delay], func(b *testing.B) {
			const n = 24
			card := pkcs11test.NewGOSTCard(b, pkcs11test.GOSTCardOptions{SignDelay: delay})
			file, _ := pkcs11test.GOSTCertificateFor(b, card.PublicKey, "bench")
			in := filepath.Join(b.TempDir(), "hash")
			os.WriteFile(in, make([]byte, 32), 0o600)
			for range b.N {
				start := time.Now()
				for range n {
					cmd := exec.Command("pkcs11-tool", "--module", card.Module, "--login", "--pin", "env:SIGNAGENT_RIG_PIN", "--sign", "-m", "GOSTR3410",
						"--id", "01", "-i", in, "-o", os.DevNull)
					cmd.Env = append(append(os.Environ(), card.Env...), "SIGNAGENT_RIG_PIN="+card.PIN)
					if out, err := cmd.CombinedOutput(); err != nil {
						b.Fatalf("pkcs11-tool: %v\n%s", err, out)
					}
				}
				alone := float64(n) / time.Since(start).Seconds()

				sock := filepath.Join(shortDir(b), "a.sock")
				a := startServe(b, signagent(b, append([]string{"SIGNAGENT_API_KEY=" + testAPIKey}, card.Env...), "serve", "--listen", "unix:"+sock,
					"--audit-log", os.DevNull, "--module", card.Module, "--token-label", card.Label, "--key-label", card.KeyLabel,
					"--pin-file", card.PINFile, "--certificate-file", file), sock)
				for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(20 * time.Millisecond) {
					if code, _ := a.do("GET", "/readyz", ""); code == 200 {
						break
					}
					if time.Now().After(deadline) {
						b.Fatalf("the agent is not ready: %s", a.stderr.String())
					}
				}
				start = time.Now()
				var wg sync.WaitGroup
				jobs := make(chan struct{}, n)
				for range n {
					jobs <- struct{}{}
				}
				close(jobs)
				for range 12 {
					wg.Add(1)
					go func() {
						defer wg.Done()
						for range jobs {
							if code, body := a.sign(); code != 200 {
								b.Errorf("a signature: %d %s", code, body)
							}
						}
					}()
				}
				wg.Wait()
				agent := float64(n) / time.Since(start).Seconds()
				b.ReportMetric(alone, "card-sig/s")
				b.ReportMetric(agent, "agent-sig/s")
				b.ReportMetric(agent/alone, "agent/card")
				a.cmd.Process.Kill()
				<-a.done
			}
		})
	}
}
