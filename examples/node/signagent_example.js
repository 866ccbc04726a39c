#!/usr/bin/env node
// A partner system calling the signagent agent: Node.js, standard library only.
//
// It asks the agent for a signature, a session (auth.sid), an authorization
// (a business Authorization header) and makes business calls through the
// agent's proxy, handling errors by the documented status and the
// Signagent-Error header (docs/agent.md, docs/openapi.yaml).
//
// Usage:  node signagent_example.js PHONE SERVICE_USER_ID
//
// Where the agent is (environment, never argv, for anything secret):
//   SIGNAGENT_AGENT_URL          a TCP listener, e.g. http://127.0.0.1:8700; then
//   SIGNAGENT_BEARER_TOKEN_FILE  the file holding the agent's bearer token
//   SIGNAGENT_AGENT_SOCK         else the Unix socket (default
//                                $XDG_RUNTIME_DIR/signagent/agent.sock)
'use strict';
const fs = require('fs');
const http = require('http');
const path = require('path');

// AgentError is an answer the agent wrote itself: {"error": {"code", "message", ...}}.
class AgentError extends Error {
  constructor(status, body, retryAfter) {
    let err = {};
    try {
      err = JSON.parse(body).error || {};
    } catch (e) {
      // not the agent's JSON (a proxy in between?): keep the status
    }
    super(`${status} ${err.code || ''}: ${err.message || body.slice(0, 200)}`);
    this.status = status;
    this.code = err.code || '';
    this.serviceCode = err.serviceCode || ''; // the service's code, on 422
    this.retryAfter = retryAfter;
  }

  // 429 queue_full and 503 (token_not_ready, busy, ...) say "try again in
  // a moment" (Retry-After); 502/504 are the service's trouble.
  get temporary() {
    return this.status === 429 || this.status === 503;
  }
}

class Agent {
  constructor() {
    this.headers = {};
    const url = process.env.SIGNAGENT_AGENT_URL;
    if (url) {
      const u = new URL(url);
      this.where = { host: u.hostname, port: u.port || 80 };
      // The bearer token is a secret: from a file (0600), never argv.
      const file = process.env.SIGNAGENT_BEARER_TOKEN_FILE;
      if (!file) throw new Error('SIGNAGENT_BEARER_TOKEN_FILE names no file');
      this.headers.Authorization = 'Bearer ' + fs.readFileSync(file, 'utf8').trim();
    } else {
      this.where = {
        socketPath: process.env.SIGNAGENT_AGENT_SOCK ||
          path.join(process.env.XDG_RUNTIME_DIR || '/run', 'signagent', 'agent.sock'),
      };
    }
  }

  // request is one HTTP exchange: {status, headers, text}.
  request(method, urlPath, body, headers) {
    const data = body === undefined ? null : JSON.stringify(body);
    const h = Object.assign({}, this.headers, headers);
    if (data !== null) h['Content-Type'] = 'application/json';
    return new Promise((resolve, reject) => {
      const req = http.request({ ...this.where, method, path: urlPath, headers: h, timeout: 35000 }, (res) => {
        const chunks = [];
        res.on('data', (c) => chunks.push(c));
        res.on('end', () => resolve({ status: res.statusCode, headers: res.headers, text: Buffer.concat(chunks).toString() }));
        res.on('error', reject);
      });
      req.on('timeout', () => req.destroy(new Error('the agent did not answer in time')));
      req.on('error', reject);
      req.end(data);
    });
  }

  // call is a call to the agent's own API: the JSON answer, or AgentError.
  // A temporary refusal is tried again after Retry-After, three times.
  async call(method, urlPath, body) {
    for (let attempt = 0; ; attempt++) {
      const r = await this.request(method, urlPath, body);
      if (r.status === 200) return JSON.parse(r.text);
      const err = new AgentError(r.status, r.text, r.headers['retry-after']);
      if (!err.temporary || attempt === 2) throw err;
      await new Promise((ok) => setTimeout(ok, 1000 * (parseInt(err.retryAfter, 10) || 1)));
    }
  }

  // service is a business call through the proxy. The answer is the
  // service's own unless it carries Signagent-Error: then the agent wrote it.
  async service(method, identity) {
    const r = await this.request('GET', '/v1/service/' + method, undefined, { 'Signagent-Identity': identity });
    if (r.headers['signagent-error']) throw new AgentError(r.status, r.text, r.headers['retry-after']);
    return r;
  }
}

async function main(phone, serviceUserId) {
  const agent = new Agent();

  // A signature of the trusted-authentication text, made on the token.
  const sig = await agent.call('POST', '/v1/signatures', { phone });
  console.log(`signature: ${sig.signature.length} base64 characters of CMS, signer certificate ${sig.certificateThumbprint}`);

  // A session: the auth.sid is a secret, so print only its length.
  const sess = await agent.call('POST', '/v1/sessions', { phone, serviceUserId });
  console.log(`session: an auth.sid of ${sess.sid.length} characters, cached ${sess.cached}`);

  // An Authorization header for your own business calls (legacy scheme, by
  // the session above). The agent gives it only with --expose-legacy-header;
  // else 403: use the proxy below instead.
  const auth = await agent.call('POST', '/v1/authorizations',
    { scheme: 'legacy', by: 'sid', credential: { phone }, serviceUserId });
  console.log(`authorization: a ${auth.authorization.split(' ')[0]} header of ${auth.authorization.length} characters, expires ${auth.expiresAt}`);

  // Business calls through the agent's proxy: it adds the header.
  const identity = `trusted phone=${phone} serviceUserId=${serviceUserId}`;
  let r = await agent.service('GetMyOrganizations?autoRegister=false', identity);
  console.log(`business call: GetMyOrganizations answered ${r.status}, ${JSON.parse(r.text).Organizations.length} organization(s)`);

  // The service's own refusal comes as the service sent it.
  r = await agent.service('GetMyEmployee?boxId=00000000-0000-0000-0000-000000000000', identity);
  console.log(`business call: GetMyEmployee answered ${r.status} by the service (X-Service-ErrorCode ${r.headers['x-service-errorcode']})`);

  // The agent's own refusal carries Signagent-Error: here the service knows
  // no user linked to this serviceUserId (422 service_refused).
  try {
    await agent.service('GetMyOrganizations?autoRegister=false', `trusted phone=${phone} serviceUserId=${serviceUserId}-unlinked`);
  } catch (e) {
    if (!(e instanceof AgentError) || e.status !== 422) throw e;
    console.log(`business call: the agent answered ${e.status} ${e.code} (${e.serviceCode})`);
  }
}

if (process.argv.length !== 4) {
  console.error('usage: node signagent_example.js PHONE SERVICE_USER_ID');
  process.exit(2);
}
main(process.argv[2], process.argv[3]).catch((e) => {
  console.error(e instanceof AgentError
    ? `signagent example: the agent answered ${e.message}`
    : `signagent example: the agent could not be reached: ${e.message}`);
  process.exit(1);
});
