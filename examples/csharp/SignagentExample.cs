// A partner system calling the signagent agent: C#, the base library alone
// (HttpClient, DataContractJsonSerializer); it builds with mono's mcs and on
// .NET (SignagentExample.csproj).
//
// It asks the agent for a signature, a session (auth.sid), an authorization
// (a business Authorization header) and makes business calls through the
// agent's proxy, handling errors by the documented status and the
// Signagent-Error header (docs/agent.md, docs/openapi.yaml). HttpClient has
// no Unix socket on mono, so this example uses the agent's TCP listener
// with its bearer token.
//
// Usage:  mono SignagentExample.exe PHONE SERVICE_USER_ID
//
// Where the agent is (environment, never argv, for anything secret):
//   SIGNAGENT_AGENT_URL          the TCP listener (default http://127.0.0.1:8700)
//   SIGNAGENT_BEARER_TOKEN_FILE  the file holding the agent's bearer token
using System;
using System.IO;
using System.Linq;
using System.Net.Http;
using System.Net.Http.Headers;
using System.Runtime.Serialization;
using System.Runtime.Serialization.Json;
using System.Text;
using System.Threading;
using System.Threading.Tasks;

namespace Signagent.Example
{
    // The agent's answers (docs/openapi.yaml), as much as this example reads.
    [DataContract] class Credential { [DataMember(Name = "phone")] public string Phone; }
    [DataContract] class SignatureRequest { [DataMember(Name = "phone")] public string Phone; }
    [DataContract] class SignatureResponse
    {
        [DataMember(Name = "signature")] public string Signature;
        [DataMember(Name = "certificateThumbprint")] public string CertificateThumbprint;
    }
    [DataContract] class SessionRequest
    {
        [DataMember(Name = "phone")] public string Phone;
        [DataMember(Name = "serviceUserId")] public string ServiceUserId;
    }
    [DataContract] class SessionResponse
    {
        [DataMember(Name = "sid")] public string Sid;
        [DataMember(Name = "cached")] public bool Cached;
    }
    [DataContract] class AuthorizationRequest
    {
        [DataMember(Name = "scheme")] public string Scheme;
        [DataMember(Name = "by")] public string By;
        [DataMember(Name = "credential")] public Credential Credential;
        [DataMember(Name = "serviceUserId")] public string ServiceUserId;
    }
    [DataContract] class AuthorizationResponse
    {
        [DataMember(Name = "authorization")] public string Authorization;
        [DataMember(Name = "expiresAt")] public string ExpiresAt;
    }
    [DataContract] class ErrorBody { [DataMember(Name = "error")] public ErrorDetail Error; }
    [DataContract] class ErrorDetail
    {
        [DataMember(Name = "code")] public string Code;
        [DataMember(Name = "message")] public string Message;
        [DataMember(Name = "serviceCode")] public string ServiceCode;
    }
    // What the service's GetMyOrganizations answers (through the proxy), as
    // much as this example reads: how many organizations.
    [DataContract] class Organization { }
    [DataContract] class Organizations { [DataMember(Name = "Organizations")] public Organization[] List; }

    // An answer the agent wrote itself: {"error": {"code", "message", ...}}.
    class AgentException : Exception
    {
        public readonly int Status;
        public readonly string Code, ServiceCode;
        public readonly TimeSpan RetryAfter;

        public AgentException(int status, ErrorDetail e, TimeSpan retryAfter)
            : base(status + " " + (e == null ? "" : e.Code) + ": " + (e == null ? "" : e.Message))
        {
            Status = status;
            Code = e == null ? "" : e.Code;
            ServiceCode = e == null ? "" : e.ServiceCode; // the service's code, on 422
            RetryAfter = retryAfter;
        }

        // 429 queue_full and 503 (token_not_ready, busy, ...) say "try again
        // in a moment" (Retry-After); 502/504 are the service's trouble.
        public bool Temporary { get { return Status == 429 || Status == 503; } }
    }

    class Agent
    {
        readonly HttpClient http;

        public Agent()
        {
            string url = Environment.GetEnvironmentVariable("SIGNAGENT_AGENT_URL");
            string file = Environment.GetEnvironmentVariable("SIGNAGENT_BEARER_TOKEN_FILE");
            if (string.IsNullOrEmpty(file))
                throw new IOException("SIGNAGENT_BEARER_TOKEN_FILE names no file");
            http = new HttpClient { BaseAddress = new Uri(string.IsNullOrEmpty(url) ? "http://127.0.0.1:8700" : url), Timeout = TimeSpan.FromSeconds(35) };
            // The bearer token is a secret: from a file (0600), never argv.
            http.DefaultRequestHeaders.Authorization = new AuthenticationHeaderValue("Bearer", File.ReadAllText(file).Trim());
        }

        public static T Read<T>(string json)
        {
            using (var s = new MemoryStream(Encoding.UTF8.GetBytes(json)))
                return (T)new DataContractJsonSerializer(typeof(T)).ReadObject(s);
        }

        static string Write<T>(T v)
        {
            using (var s = new MemoryStream())
            {
                new DataContractJsonSerializer(typeof(T)).WriteObject(s, v);
                return Encoding.UTF8.GetString(s.ToArray());
            }
        }

        static AgentException Error(HttpResponseMessage r, string body)
        {
            ErrorDetail e = null;
            try { e = Read<ErrorBody>(body).Error; }
            catch (SerializationException) { } // not the agent's JSON (a proxy in between?): keep the status
            var wait = r.Headers.RetryAfter != null && r.Headers.RetryAfter.Delta.HasValue ? r.Headers.RetryAfter.Delta.Value : TimeSpan.FromSeconds(1);
            return new AgentException((int)r.StatusCode, e, wait);
        }

        // A call to the agent's own API: the JSON answer, or AgentException.
        // A temporary refusal is tried again after Retry-After, three times.
        public async Task<TResp> Call<TReq, TResp>(string path, TReq body)
        {
            for (int attempt = 0; ; attempt++)
            {
                var content = new StringContent(Write(body), Encoding.UTF8, "application/json");
                using (var r = await http.PostAsync(path, content))
                {
                    string text = await r.Content.ReadAsStringAsync();
                    if ((int)r.StatusCode == 200)
                        return Read<TResp>(text);
                    var err = Error(r, text);
                    if (!err.Temporary || attempt == 2)
                        throw err;
                    Thread.Sleep(err.RetryAfter);
                }
            }
        }

        // A business call through the proxy. The answer is the service's own
        // unless it carries Signagent-Error: then the agent wrote it.
        public async Task<Tuple<HttpResponseMessage, string>> Service(string method, string identity)
        {
            var req = new HttpRequestMessage(HttpMethod.Get, "/v1/service/" + method);
            req.Headers.Add("Signagent-Identity", identity);
            var r = await http.SendAsync(req);
            string text = await r.Content.ReadAsStringAsync();
            if (r.Headers.Contains("Signagent-Error"))
                throw Error(r, text);
            return Tuple.Create(r, text);
        }
    }

    static class Program
    {
        static async Task Run(string phone, string serviceUserId)
        {
            var agent = new Agent();

            // A signature of the trusted-authentication text, made on the token.
            var sig = await agent.Call<SignatureRequest, SignatureResponse>("/v1/signatures", new SignatureRequest { Phone = phone });
            Console.WriteLine("signature: " + sig.Signature.Length + " base64 characters of CMS, signer certificate " + sig.CertificateThumbprint);

            // A session: the auth.sid is a secret, so print only its length.
            var sess = await agent.Call<SessionRequest, SessionResponse>("/v1/sessions", new SessionRequest { Phone = phone, ServiceUserId = serviceUserId });
            Console.WriteLine("session: an auth.sid of " + sess.Sid.Length + " characters, cached " + (sess.Cached ? "true" : "false"));

            // An Authorization header for your own business calls (legacy
            // scheme, by the session above). The agent gives it only with
            // --expose-legacy-header; else 403: use the proxy below instead.
            var auth = await agent.Call<AuthorizationRequest, AuthorizationResponse>("/v1/authorizations", new AuthorizationRequest
            {
                Scheme = "legacy", By = "sid", Credential = new Credential { Phone = phone }, ServiceUserId = serviceUserId,
            });
            Console.WriteLine("authorization: a " + auth.Authorization.Split(' ')[0] + " header of " + auth.Authorization.Length + " characters, expires " + auth.ExpiresAt);

            // Business calls through the agent's proxy: it adds the header.
            string identity = "trusted phone=" + phone + " serviceUserId=" + serviceUserId;
            var r = await agent.Service("GetMyOrganizations?autoRegister=false", identity);
            Console.WriteLine("business call: GetMyOrganizations answered " + (int)r.Item1.StatusCode + ", " + Agent.Read<Organizations>(r.Item2).List.Length + " organization(s)");

            // The service's own refusal comes as the service sent it.
            r = await agent.Service("GetMyEmployee?boxId=00000000-0000-0000-0000-000000000000", identity);
            var code = r.Item1.Headers.Contains("X-Service-ErrorCode") ? r.Item1.Headers.GetValues("X-Service-ErrorCode").First() : "";
            Console.WriteLine("business call: GetMyEmployee answered " + (int)r.Item1.StatusCode + " by the service (X-Service-ErrorCode " + code + ")");

            // The agent's own refusal carries Signagent-Error: here the service
            // knows no user linked to this serviceUserId (422 service_refused).
            try
            {
                await agent.Service("GetMyOrganizations?autoRegister=false", "trusted phone=" + phone + " serviceUserId=" + serviceUserId + "-unlinked");
            }
            catch (AgentException e) when (e.Status == 422)
            {
                Console.WriteLine("business call: the agent answered " + e.Status + " " + e.Code + " (" + e.ServiceCode + ")");
            }
        }

        static int Main(string[] args)
        {
            if (args.Length != 2)
            {
                Console.Error.WriteLine("usage: SignagentExample PHONE SERVICE_USER_ID");
                return 2;
            }
            try
            {
                Run(args[0], args[1]).GetAwaiter().GetResult();
                return 0;
            }
            catch (AgentException e)
            {
                Console.Error.WriteLine("signagent example: the agent answered " + e.Message);
            }
            catch (Exception e) when (e is HttpRequestException || e is IOException || e is TaskCanceledException)
            {
                Console.Error.WriteLine("signagent example: the agent could not be reached: " + e.Message);
            }
            return 1;
        }
    }
}
