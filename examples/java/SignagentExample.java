// A partner system calling the signagent agent: Java 17, the JDK alone
// (java.net.http.HttpClient).
//
// It asks the agent for a signature, a session (auth.sid), an authorization
// (a business Authorization header) and makes business calls through the
// agent's proxy, handling errors by the documented status and the
// Signagent-Error header (docs/agent.md, docs/openapi.yaml). The JDK's
// HttpClient has no Unix socket, so this example uses the agent's TCP
// listener with its bearer token.
//
// Usage:  java SignagentExample.java PHONE SERVICE_USER_ID
//
// Where the agent is (environment, never argv, for anything secret):
//   SIGNAGENT_AGENT_URL          the TCP listener (default http://127.0.0.1:8700)
//   SIGNAGENT_BEARER_TOKEN_FILE  the file holding the agent's bearer token
//
// The JDK has no JSON library: Json below reads the agent's answers. A
// partner system would use the one it has (Jackson, Gson, JSON-B).
import java.io.IOException;
import java.net.URI;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;

public class SignagentExample {
    /** An answer the agent wrote itself: {"error": {"code", "message", ...}}. */
    static class AgentError extends Exception {
        final int status;
        final String code, serviceCode;
        final long retryAfter;

        AgentError(HttpResponse<String> r) {
            super(r.statusCode() + " " + field(r.body(), "code") + ": " + field(r.body(), "message"));
            status = r.statusCode();
            code = field(r.body(), "code");
            serviceCode = field(r.body(), "serviceCode"); // the service's code, on 422
            retryAfter = r.headers().firstValueAsLong("Retry-After").orElse(1);
        }

        // 429 queue_full and 503 (token_not_ready, busy, ...) say "try again
        // in a moment" (Retry-After); 502/504 are the service's trouble.
        boolean temporary() {
            return status == 429 || status == 503;
        }

        private static String field(String body, String name) {
            try {
                Object err = ((Map<?, ?>) Json.parse(body)).get("error");
                Object v = err instanceof Map ? ((Map<?, ?>) err).get(name) : null;
                return v == null ? "" : v.toString();
            } catch (RuntimeException e) {
                return ""; // not the agent's JSON (a proxy in between?): keep the status
            }
        }
    }

    // HTTP/1.1: the agent speaks it, and HttpClient's default (HTTP/2) would
    // offer an upgrade on every request.
    final HttpClient http = HttpClient.newBuilder().version(HttpClient.Version.HTTP_1_1)
            .connectTimeout(Duration.ofSeconds(5)).build();
    final String base, bearer;

    SignagentExample() throws IOException {
        base = System.getenv().getOrDefault("SIGNAGENT_AGENT_URL", "http://127.0.0.1:8700");
        String file = System.getenv("SIGNAGENT_BEARER_TOKEN_FILE");
        if (file == null || file.isEmpty()) {
            throw new IOException("SIGNAGENT_BEARER_TOKEN_FILE names no file");
        }
        // The bearer token is a secret: from a file (0600), never argv.
        bearer = Files.readString(Path.of(file)).strip();
    }

    HttpResponse<String> request(String method, String path, String json, String identity)
            throws IOException, InterruptedException {
        HttpRequest.Builder b = HttpRequest.newBuilder(URI.create(base + path))
                .timeout(Duration.ofSeconds(35))
                .header("Authorization", "Bearer " + bearer);
        if (identity != null) {
            b.header("Signagent-Identity", identity);
        }
        if (json != null) {
            b.header("Content-Type", "application/json").method(method, HttpRequest.BodyPublishers.ofString(json));
        } else {
            b.method(method, HttpRequest.BodyPublishers.noBody());
        }
        return http.send(b.build(), HttpResponse.BodyHandlers.ofString());
    }

    /** A call to the agent's own API: the JSON answer, or AgentError. A
     * temporary refusal is tried again after Retry-After, three times. */
    Map<?, ?> call(String method, String path, String json) throws Exception {
        for (int attempt = 0; ; attempt++) {
            HttpResponse<String> r = request(method, path, json, null);
            if (r.statusCode() == 200) {
                return (Map<?, ?>) Json.parse(r.body());
            }
            AgentError err = new AgentError(r);
            if (!err.temporary() || attempt == 2) {
                throw err;
            }
            Thread.sleep(1000 * err.retryAfter);
        }
    }

    /** A business call through the proxy. The answer is the service's own
     * unless it carries Signagent-Error: then the agent wrote it. */
    HttpResponse<String> service(String method, String identity) throws Exception {
        HttpResponse<String> r = request("GET", "/v1/service/" + method, null, identity);
        if (r.headers().firstValue("Signagent-Error").isPresent()) {
            throw new AgentError(r);
        }
        return r;
    }

    void run(String phone, String serviceUserId) throws Exception {
        // A signature of the trusted-authentication text, made on the token.
        Map<?, ?> sig = call("POST", "/v1/signatures", "{\"phone\":" + Json.quote(phone) + "}");
        System.out.println("signature: " + sig.get("signature").toString().length()
                + " base64 characters of CMS, signer certificate " + sig.get("certificateThumbprint"));

        // A session: the auth.sid is a secret, so print only its length.
        String who = "\"phone\":" + Json.quote(phone) + ",\"serviceUserId\":" + Json.quote(serviceUserId);
        Map<?, ?> sess = call("POST", "/v1/sessions", "{" + who + "}");
        System.out.println("session: an auth.sid of " + sess.get("sid").toString().length()
                + " characters, cached " + sess.get("cached"));

        // An Authorization header for your own business calls (legacy scheme,
        // by the session above). The agent gives it only with
        // --expose-legacy-header; else 403: use the proxy below instead.
        Map<?, ?> auth = call("POST", "/v1/authorizations", "{\"scheme\":\"legacy\",\"by\":\"sid\",\"credential\":{\"phone\":"
                + Json.quote(phone) + "},\"serviceUserId\":" + Json.quote(serviceUserId) + "}");
        String header = auth.get("authorization").toString();
        System.out.println("authorization: a " + header.split(" ")[0] + " header of " + header.length()
                + " characters, expires " + auth.get("expiresAt"));

        // Business calls through the agent's proxy: it adds the header.
        String identity = "trusted phone=" + phone + " serviceUserId=" + serviceUserId;
        HttpResponse<String> r = service("GetMyOrganizations?autoRegister=false", identity);
        List<?> orgs = (List<?>) ((Map<?, ?>) Json.parse(r.body())).get("Organizations");
        System.out.println("business call: GetMyOrganizations answered " + r.statusCode() + ", " + orgs.size() + " organization(s)");

        // The service's own refusal comes as the service sent it.
        r = service("GetMyEmployee?boxId=00000000-0000-0000-0000-000000000000", identity);
        System.out.println("business call: GetMyEmployee answered " + r.statusCode() + " by the service (X-Service-ErrorCode "
                + r.headers().firstValue("X-Service-ErrorCode").orElse("") + ")");

        // The agent's own refusal carries Signagent-Error: here the service
        // knows no user linked to this serviceUserId (422 service_refused).
        try {
            service("GetMyOrganizations?autoRegister=false", "trusted phone=" + phone + " serviceUserId=" + serviceUserId + "-unlinked");
        } catch (AgentError e) {
            if (e.status != 422) {
                throw e;
            }
            System.out.println("business call: the agent answered " + e.status + " " + e.code + " (" + e.serviceCode + ")");
        }
    }

    public static void main(String[] args) {
        if (args.length != 2) {
            System.err.println("usage: java SignagentExample.java PHONE SERVICE_USER_ID");
            System.exit(2);
        }
        try {
            new SignagentExample().run(args[0], args[1]);
        } catch (AgentError e) {
            System.err.println("signagent example: the agent answered " + e.getMessage());
            System.exit(1);
        } catch (Exception e) {
            System.err.println("signagent example: the agent could not be reached: " + e);
            System.exit(1);
        }
    }

    /** The least of JSON: objects, arrays, strings, numbers, true, false, null. */
    static final class Json {
        private final String s;
        private int i;

        private Json(String s) {
            this.s = s;
        }

        static Object parse(String s) {
            Json p = new Json(s);
            Object v = p.value();
            p.space();
            if (p.i != s.length()) {
                throw new IllegalArgumentException("JSON: text after the value");
            }
            return v;
        }

        static String quote(String v) {
            StringBuilder b = new StringBuilder("\"");
            for (char c : v.toCharArray()) {
                if (c == '"' || c == '\\') {
                    b.append('\\').append(c);
                } else if (c < 0x20) {
                    b.append(String.format("\\u%04x", (int) c));
                } else {
                    b.append(c);
                }
            }
            return b.append('"').toString();
        }

        private void space() {
            while (i < s.length() && Character.isWhitespace(s.charAt(i))) {
                i++;
            }
        }

        private Object value() {
            space();
            if (i >= s.length()) {
                throw new IllegalArgumentException("JSON: unexpected end");
            }
            char c = s.charAt(i);
            if (c == '{') {
                Map<String, Object> m = new LinkedHashMap<>();
                i++;
                space();
                if (s.charAt(i) == '}') {
                    i++;
                    return m;
                }
                do {
                    space();
                    String k = string();
                    space();
                    expect(':');
                    m.put(k, value());
                    space();
                } while (s.charAt(i++) == ',');
                if (s.charAt(i - 1) != '}') {
                    throw new IllegalArgumentException("JSON: expected }");
                }
                return m;
            }
            if (c == '[') {
                List<Object> l = new ArrayList<>();
                i++;
                space();
                if (s.charAt(i) == ']') {
                    i++;
                    return l;
                }
                do {
                    l.add(value());
                    space();
                } while (s.charAt(i++) == ',');
                if (s.charAt(i - 1) != ']') {
                    throw new IllegalArgumentException("JSON: expected ]");
                }
                return l;
            }
            if (c == '"') {
                return string();
            }
            for (String w : new String[] {"true", "false", "null"}) {
                if (s.startsWith(w, i)) {
                    i += w.length();
                    return w.equals("null") ? null : Boolean.valueOf(w);
                }
            }
            int start = i;
            while (i < s.length() && "+-0123456789.eE".indexOf(s.charAt(i)) >= 0) {
                i++;
            }
            if (start == i) {
                throw new IllegalArgumentException("JSON: unexpected " + c);
            }
            return Double.valueOf(s.substring(start, i));
        }

        private String string() {
            expect('"');
            StringBuilder b = new StringBuilder();
            for (char c; (c = s.charAt(i++)) != '"'; ) {
                if (c != '\\') {
                    b.append(c);
                    continue;
                }
                char e = s.charAt(i++);
                switch (e) {
                    case 'n': b.append('\n'); break;
                    case 't': b.append('\t'); break;
                    case 'r': b.append('\r'); break;
                    case 'b': b.append('\b'); break;
                    case 'f': b.append('\f'); break;
                    case 'u': b.append((char) Integer.parseInt(s.substring(i, i + 4), 16)); i += 4; break;
                    default: b.append(e); // \" \\ \/
                }
            }
            return b.toString();
        }

        private void expect(char c) {
            if (i >= s.length() || s.charAt(i) != c) {
                throw new IllegalArgumentException("JSON: expected " + c);
            }
            i++;
        }
    }
}
