package helm

import (
	"crypto/rand"
	"crypto/tls"
	"encoding/hex"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
)

// The pod's user and group (podSecurityContext): the agent and its probes
// run as them, Secret files are root's with this group.
const podID = 65532

// TestRenderedAgentServes runs what the chart renders, as a pod would, on
// this machine: signagent (built from this tree) as 65532:65532 with the
// rendered agent.yaml, its paths moved under a scratch directory, the
// Secret files laid out as a Secret volume with fsGroup lays them out
// (root's, group 65532, each volume's defaultMode), a real
// redis-server as the store, and the probes' own commands: live and ready;
// Redis killed: not ready (exit 1) but live; Redis back: ready again. The
// helm test pod's command, as rendered, asks the metrics port over TLS:
// ready, and ready with Redis down (degraded).
// Root only (files of other owners, another user); CI runs as root.
func TestRenderedAgentServes(t *testing.T) {
	if os.Getuid() != 0 {
		t.Skip("running as the pod's user needs root; CI runs as root")
	}
	redis, err := exec.LookPath("redis-server")
	if err != nil {
		t.Fatal("redis-server is not installed: make test installs it")
	}
	root := t.TempDir()
	must(t, os.Chmod(root, 0o755))
	must(t, os.Chmod(filepath.Dir(root), 0o755))
	bin := filepath.Join(root, "signagent")
	build := exec.Command("go", "build", "-o", bin, "./cmd/signagent")
	build.Dir = "../.."
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}

	rport, aport, mport := freePort(t), freePort(t), freePort(t)
	manifest, err := render(vals(t, filepath.Join(chartDir, "values-oidc-redis.yaml"),
		"store.url=redis://127.0.0.1:"+rport+"/0", "store.password.secretName=", "store.ca.secretName=", "agent.port="+aport, "agent.metricsPort="+mport,
		"oidc.apiURL=http://127.0.0.1:1", "oidc.authURL=http://127.0.0.1:1"))
	if err != nil {
		t.Fatal(err)
	}
	var cfg *corev1.ConfigMap
	var hook *corev1.Pod
	// The file modes the kubelet gives each mounted directory's files: a
	// volume's defaultMode, else 0644.
	modes := map[string]os.FileMode{}
	for _, doc := range documents(manifest) {
		obj, err := check(doc)
		if err != nil {
			t.Fatal(err)
		}
		switch o := obj.(type) {
		case *corev1.ConfigMap:
			cfg = o
		case *corev1.Pod:
			hook = o
		case *appsv1.Deployment:
			byName := map[string]*int32{}
			for _, v := range o.Spec.Template.Spec.Volumes {
				switch {
				case v.Secret != nil:
					byName[v.Name] = v.Secret.DefaultMode
				case v.ConfigMap != nil:
					byName[v.Name] = v.ConfigMap.DefaultMode
				}
			}
			for _, m := range o.Spec.Template.Spec.Containers[0].VolumeMounts {
				if mode, ok := byName[m.Name]; ok {
					modes[m.MountPath] = 0o644
					if mode != nil {
						modes[m.MountPath] = os.FileMode(*mode)
					}
				}
			}
		}
	}
	if cfg == nil || len(modes) == 0 || hook == nil {
		t.Fatal("no ConfigMap, Deployment or helm test pod rendered")
	}
	settings := strings.NewReplacer("/etc/signagent/", root+"/etc/", "/run/signagent", root+"/run",
		"/var/lib/signagent", root+"/state", "tcp:0.0.0.0:", "tcp:127.0.0.1:").Replace(cfg.Data["agent.yaml"])
	etc := filepath.Join(root, "etc")
	secret := func(rel, body string) {
		p := filepath.Join(etc, rel)
		must(t, os.MkdirAll(filepath.Dir(p), 0o755))
		must(t, os.WriteFile(p, []byte(body), 0o440))
	}
	secret("agent.yaml", settings)
	secret("secrets/bearer-token/token", randomHex(t)+"\n")
	secret("secrets/client-secret/client-secret", randomHex(t)+"\n")
	secret("secrets/store-key/store.key", randomHex(t)+randomHex(t)+"\n")
	cert := exec.Command("openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
		// the names the Service gives the agents (the helm test asks the
		// first), and loopback, where this test's agent listens
		"-subj", "/CN=crm-signagent", "-addext", "subjectAltName=DNS:crm-signagent.partners.svc,IP:127.0.0.1", "-days", "1", "-keyout", filepath.Join(etc, "tls/tls.key"), "-out", filepath.Join(etc, "tls/tls.crt"))
	must(t, os.MkdirAll(filepath.Join(etc, "tls"), 0o755))
	if out, err := cert.CombinedOutput(); err != nil {
		t.Fatalf("openssl: %v\n%s", err, out)
	}
	must(t, filepath.Walk(etc, func(p string, fi os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		if !fi.IsDir() {
			// the mount's path in the pod: agent.yaml is a subPath mount
			mount := "/etc/signagent/" + strings.TrimPrefix(filepath.Dir(p), etc)
			if filepath.Base(p) == "agent.yaml" {
				mount = "/etc/signagent/agent.yaml"
			}
			mode, ok := modes[filepath.Clean(mount)]
			if !ok {
				return fmt.Errorf("%s: no volume is mounted at %s", p, mount)
			}
			if err := os.Chmod(p, mode); err != nil {
				return err
			}
		}
		return os.Chown(p, 0, podID)
	}))
	for _, d := range []string{"run", "state"} {
		must(t, os.Mkdir(filepath.Join(root, d), 0o755))
		must(t, os.Chown(filepath.Join(root, d), podID, podID))
	}

	startRedis := func() *exec.Cmd {
		cmd := exec.Command(redis, "--bind", "127.0.0.1", "--port", rport, "--save", "", "--appendonly", "no", "--dir", root)
		must(t, cmd.Start())
		return cmd
	}
	store := startRedis()
	t.Cleanup(func() { store.Process.Kill(); store.Wait() })

	asPod := func(args ...string) *exec.Cmd {
		cmd := exec.Command(bin, args...)
		cmd.Env = []string{"HOME=" + root + "/state", "PATH=/usr/bin:/bin"}
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: podID, Gid: podID, Groups: []uint32{}}}
		return cmd
	}
	agent := asPod("serve", "--config", filepath.Join(etc, "agent.yaml"), "--log-format", "json")
	log, err := os.Create(filepath.Join(root, "agent.log"))
	must(t, err)
	agent.Stdout, agent.Stderr = log, log
	must(t, agent.Start())
	t.Cleanup(func() { agent.Process.Signal(syscall.SIGTERM); agent.Wait() })

	sock := filepath.Join(root, "run", "agent.sock")
	probe := func(kind string) (int, string) {
		out, err := asPod("agent", "status", "--probe", kind, "--agent-sock", sock).CombinedOutput()
		if ee, ok := err.(*exec.ExitError); ok {
			return ee.ExitCode(), string(out)
		} else if err != nil {
			t.Fatal(err)
		}
		return 0, string(out)
	}
	// until probe says want (the startup probe's 60 tries, 100 ms apart)
	until := func(kind string, want int) (int, string) {
		var code int
		var out string
		for range 60 {
			if code, out = probe(kind); code == want {
				break
			}
			time.Sleep(100 * time.Millisecond)
		}
		return code, out
	}
	if code, out := until("live", 0); code != 0 {
		b, _ := os.ReadFile(filepath.Join(root, "agent.log"))
		t.Fatalf("live: exit %d: %s\nagent: %s", code, out, b)
	}
	if code, out := until("ready", 0); code != 0 {
		t.Fatalf("ready: exit %d: %s", code, out)
	}
	// The ServiceMonitor's scrape: the metrics port over TLS, no bearer
	// token; nothing else is served there.
	scraper := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}}
	for path, want := range map[string]int{"/metrics": 200, "/readyz": 200, "/livez": 200, "/v1/identities": 404, "/v1/service/GetMyOrganizations": 404} {
		resp, err := scraper.Get("https://127.0.0.1:" + mport + path)
		if err != nil {
			t.Fatalf("%s on the metrics port: %v", path, err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != want || path == "/metrics" && !strings.Contains(string(body), "signagent_build_info{") {
			t.Errorf("%s on the metrics port without a token: %d, want %d: %.300s", path, resp.StatusCode, want, body)
		}
	}
	// The helm test's pod, its command line as rendered: the Service's
	// name is this machine's loopback (no cluster here, no DNS for it),
	// the CA is the agent's self-signed certificate, mounted in the pod at
	// the path the command names.
	hookRun := func() (int, string) {
		argv := slices.Clone(hook.Spec.Containers[0].Command)
		if len(argv) < 9 || argv[0] != "/usr/bin/signagent" {
			t.Fatalf("the helm test's command %q", argv)
		}
		for i, a := range argv {
			argv[i] = strings.NewReplacer("https://crm-signagent.partners.svc:", "https://127.0.0.1:",
				"/etc/signagent/test/ca/ca.crt", filepath.Join(etc, "tls/tls.crt")).Replace(a)
		}
		out, err := asPod(argv[1:]...).CombinedOutput()
		if ee, ok := err.(*exec.ExitError); ok {
			return ee.ExitCode(), string(out)
		} else if err != nil {
			t.Fatal(err)
		}
		return 0, string(out)
	}
	if code, out := hookRun(); code != 0 || out != "" {
		t.Fatalf("the helm test's command, the agent ready: exit %d: %s", code, out)
	}
	store.Process.Kill()
	store.Wait()
	// The store is shared: with it down the agent is degraded, still
	// ready (the pod stays in the Service), and says so.
	var status string
	for range 60 {
		out, _ := asPod("agent", "status", "--agent-sock", sock).CombinedOutput()
		if status = string(out); strings.Contains(status, "down (shared: ") {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if !strings.Contains(status, "down (shared: ") {
		t.Errorf("agent status with Redis down: %s", status)
	}
	if code, out := probe("ready"); code != 0 {
		t.Errorf("ready with Redis down (degraded): exit %d: %s", code, out)
	}
	if code, out := probe("live"); code != 0 {
		t.Errorf("live with Redis down: exit %d: %s", code, out)
	}
	if code, out := hookRun(); code != 0 {
		t.Errorf("the helm test's command with Redis down (degraded): exit %d: %s", code, out)
	}
	store = startRedis()
	if code, out := until("ready", 0); code != 0 {
		t.Errorf("ready with Redis back: exit %d: %s", code, out)
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func randomHex(t *testing.T) string {
	b := make([]byte, 16)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(b)
}

func freePort(t *testing.T) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return strconv.Itoa(l.Addr().(*net.TCPAddr).Port)
}
