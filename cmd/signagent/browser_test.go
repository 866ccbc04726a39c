package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"golang.org/x/crypto/bcrypt"

	"github.com/signagent/signagent/emulator"
)

// The identity provider's pages in a real browser: Debian's chromium,
// driven by chromedp, signs in to the emulator while the real signagent
// binary runs login. Screenshots go to the test's temp dir, or to
// $SIGNAGENT_SCREENSHOTS (make screenshots refreshes the README's).

const browserPassword = "correct horse battery"

type browserBed struct {
	emu      *emulator.Server
	redirect string
	env      []string
	shots    string
}

func newBrowserBed(t *testing.T) *browserBed {
	t.Helper()
	if _, err := exec.LookPath("chromium"); err != nil {
		t.Fatal("chromium is not installed: make test installs it (scripts/deps.sh chromium)")
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	redirect := fmt.Sprintf("http://%s/callback", ln.Addr())
	ln.Close()
	// The cheapest bcrypt cost: the emulator checks the password at every
	// sign-in, and at the default cost that took seconds of CPU under -race.
	hashBytes, _ := bcrypt.GenerateFromPassword([]byte(browserPassword), bcrypt.MinCost)
	hash := string(hashBytes)
	emu := startEmulator(t, &emulator.Config{
		OIDC: emulator.OIDCConfig{Clients: []emulator.OIDCClient{{ID: "crm-app", Secret: "s3cret-of-the-app", RedirectURIs: []string{redirect}}},
			DeviceInterval: emulator.Duration(time.Second)},
		Users: []emulator.User{{ID: "alice", Login: "alice@example.com", PasswordHash: hash}},
	})
	shots := os.Getenv("SIGNAGENT_SCREENSHOTS")
	if shots == "" {
		shots = t.TempDir()
	}
	return &browserBed{emu: emu, redirect: redirect, shots: shots, env: []string{
		"XDG_STATE_HOME=" + t.TempDir(), "SIGNAGENT_OIDC_URL=" + emu.URL(), "SIGNAGENT_CLIENT_ID=crm-app",
		"SIGNAGENT_CLIENT_SECRET=s3cret-of-the-app", "SIGNAGENT_SPACE=staging", "DISPLAY=", "WAYLAND_DISPLAY=", "BROWSER="}}
}

// chromium is one headless chromium (no sandbox: CI runs as root) that
// the package's browser tests share, each in a browser context of its own
// (its own cookies and storage, as a private window). Each test started
// its own before: 4 s alone, and up to a minute each when they started
// together under the race detector on two cores.
var chromium struct {
	once   sync.Once
	ctx    context.Context // the browser's first tab, which keeps it running
	cancel context.CancelFunc
	err    error
}

// closeChromium ends the shared browser, if a test started it (TestMain).
func closeChromium() {
	if chromium.cancel != nil {
		chromium.cancel()
	}
}

// browser opens a tab in a new browser context of the shared chromium,
// closed when the test ends.
func browser(t *testing.T) context.Context {
	t.Helper()
	chromium.once.Do(func() {
		opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.NoSandbox, chromedp.DisableGPU,
			chromedp.Flag("disable-dev-shm-usage", true), chromedp.WindowSize(900, 700))
		actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
		// chromium is newer than chromedp's protocol tables: events it
		// cannot decode are reported here, and are not failures (an action
		// that fails fails its test).
		ctx, cancelBrowser := chromedp.NewContext(actx, chromedp.WithErrorf(func(string, ...any) {}))
		chromium.ctx, chromium.cancel = ctx, func() { cancelBrowser(); cancelAlloc() }
		chromium.err = chromedp.Run(ctx) // starts chromium
	})
	if chromium.err != nil {
		t.Fatalf("starting chromium: %v", chromium.err)
	}
	ctx, cancel := chromedp.NewContext(chromium.ctx, chromedp.WithNewBrowserContext())
	t.Cleanup(cancel)
	ctx, cancel2 := context.WithTimeout(ctx, 90*time.Second)
	t.Cleanup(cancel2)
	return ctx
}

// login runs signagent oidc login and returns the lines it prints on stdout
// (the result) and stderr (the instructions), as they come, and a channel
// with its exit status and stderr.
func (b *browserBed) login(t *testing.T, args ...string) (<-chan string, <-chan [2]string) {
	t.Helper()
	cmd := signagent(t, b.env, append([]string{"oidc", "login"}, args...)...)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	errOut, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill() })
	lines, done := make(chan string, 64), make(chan [2]string, 1)
	var stderr strings.Builder
	var mu sync.Mutex
	var wg sync.WaitGroup
	read := func(r io.Reader, keep bool) {
		defer wg.Done()
		sc := bufio.NewScanner(r)
		for sc.Scan() {
			if keep {
				mu.Lock()
				stderr.WriteString(sc.Text() + "\n")
				mu.Unlock()
			}
			lines <- sc.Text()
		}
		io.Copy(io.Discard, r)
	}
	wg.Add(2)
	go read(out, false)
	go read(errOut, true)
	go func() {
		wg.Wait()
		close(lines)
		err := cmd.Wait()
		mu.Lock()
		defer mu.Unlock()
		done <- [2]string{fmt.Sprint(cmd.ProcessState.ExitCode()), stderr.String() + fmt.Sprint(err)}
	}()
	return lines, done
}

func waitLine(t *testing.T, lines <-chan string, re *regexp.Regexp) []string {
	t.Helper()
	timeout := time.After(30 * time.Second)
	for {
		select {
		case l, ok := <-lines:
			if !ok {
				t.Fatalf("login ended before printing %s", re)
			}
			if m := re.FindStringSubmatch(l); m != nil {
				return m
			}
		case <-timeout:
			t.Fatalf("login did not print %s", re)
		}
	}
}

func (b *browserBed) shot(name string) chromedp.Action {
	var buf []byte
	return chromedp.ActionFunc(func(ctx context.Context) error {
		if err := chromedp.FullScreenshot(&buf, 100).Do(ctx); err != nil { // quality 100: PNG
			return err
		}
		return os.WriteFile(filepath.Join(b.shots, name), buf, 0o644)
	})
}

func waitExit(t *testing.T, done <-chan [2]string) (string, string) {
	t.Helper()
	select {
	case r := <-done:
		return r[0], r[1]
	case <-time.After(60 * time.Second):
		t.Fatal("login did not end")
	}
	return "", ""
}

var urlLine = regexp.MustCompile(`^  (http://\S+)$`)

// codeFlow runs login --flow code and plays the user in the browser: sign
// in and press decision (allow or deny). It returns the text of the page
// the browser lands on (login's loopback page), login's exit status and
// stderr, and login's output lines.
func (b *browserBed) codeFlow(t *testing.T, decision string) (string, string, string, <-chan string) {
	return b.codeFlowAfter(t, decision, nil)
}

// codeFlowAfter is codeFlow with before run once login listens, before
// the browser goes to the provider.
func (b *browserBed) codeFlowAfter(t *testing.T, decision string, before func()) (string, string, string, <-chan string) {
	t.Helper()
	lines, done := b.login(t, "--flow", "code", "--redirect-uri", b.redirect)
	u := waitLine(t, lines, urlLine)[1]
	if before != nil {
		before()
	}
	var final string
	err := chromedp.Run(browser(t),
		chromedp.Navigate(u),
		chromedp.WaitVisible("#login", chromedp.ByID),
		b.shot("signin.png"),
		chromedp.SendKeys("#login", "alice@example.com", chromedp.ByID),
		chromedp.SendKeys("#password", browserPassword, chromedp.ByID),
		chromedp.Click("#"+decision, chromedp.ByID),
		chromedp.WaitVisible("#result", chromedp.ByID), // the page login serves on the redirect address
		chromedp.Text("body", &final, chromedp.ByQuery),
		b.shot("after-"+decision+".png"),
	)
	if err != nil {
		t.Fatal(err)
	}
	code, stderr := waitExit(t, done)
	return final, code, stderr, lines
}

// TestBrowserCodeFlow: login --flow code prints the URL and listens on the
// loopback redirect; the browser signs in and allows; login exchanges the
// code and saves the tokens.
func TestBrowserCodeFlow(t *testing.T) {
	t.Parallel()
	b := newBrowserBed(t)
	final, code, stderr, lines := b.codeFlow(t, "allow")
	if !strings.Contains(final, "Signed in") || code != "0" {
		t.Fatalf("the redirect page says %q; login exit %s: %s", final, code, stderr)
	}
	waitLine(t, lines, regexp.MustCompile(`^Signed in as alice`))
}

// TestBrowserForgedRedirects: while login waits for the redirect, another
// local process sends its receiver redirects without this sign-in's state
// (an access_denied with no state, a code with another state, ...): each is
// answered 400 and ignored, and the real redirect that follows completes
// the sign-in.
func TestBrowserForgedRedirects(t *testing.T) {
	t.Parallel()
	b := newBrowserBed(t)
	forge := func() {
		for _, q := range []string{"error=access_denied", "error=access_denied&state=x", "code=c0ffee", "code=c0ffee&state=x"} {
			resp, err := http.Get(b.redirect + "?" + q)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != http.StatusBadRequest {
				t.Errorf("forged %s: %d, want 400", q, resp.StatusCode)
			}
		}
	}
	final, code, stderr, lines := b.codeFlowAfter(t, "allow", forge)
	if !strings.Contains(final, "Signed in") || code != "0" {
		t.Fatalf("the redirect page says %q; login exit %s: %s", final, code, stderr)
	}
	waitLine(t, lines, regexp.MustCompile(`^Signed in as alice`))
}

// TestBrowserDevicePage: the device flow's user enters the code on the
// /device page in a browser.
func TestBrowserDevicePage(t *testing.T) {
	t.Parallel()
	b := newBrowserBed(t)
	lines, done := b.login(t)
	m := waitLine(t, lines, regexp.MustCompile(`^or go to (\S+) and enter the code ([A-Z]{8})$`))
	var msg string
	err := chromedp.Run(browser(t),
		chromedp.Navigate(m[1]),
		chromedp.WaitVisible("#user_code", chromedp.ByID),
		chromedp.SendKeys("#user_code", m[2], chromedp.ByID),
		chromedp.SendKeys("#login", "alice@example.com", chromedp.ByID),
		chromedp.SendKeys("#password", browserPassword, chromedp.ByID),
		b.shot("device.png"),
		chromedp.Click("#allow", chromedp.ByID),
		chromedp.WaitVisible("#done", chromedp.ByID),
		chromedp.Text("#done", &msg, chromedp.ByID),
		b.shot("device-done.png"),
	)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(msg, "may now use the service") {
		t.Fatalf("the page says %q", msg)
	}
	if code, stderr := waitExit(t, done); code != "0" {
		t.Fatalf("login exit %s: %s", code, stderr)
	}
}

// TestBrowserDeny: the user denies on the sign-in page; the browser is
// sent back with error=access_denied and login ends with its sentence and
// exit status 3.
func TestBrowserDeny(t *testing.T) {
	t.Parallel()
	b := newBrowserBed(t)
	final, code, stderr, _ := b.codeFlow(t, "deny")
	if !strings.Contains(final, "access_denied") || code != "3" || !strings.Contains(stderr, "access_denied") ||
		!strings.Contains(stderr, "did not grant access") {
		t.Fatalf("the redirect page says %q; login exit %s: %s", final, code, stderr)
	}
}
