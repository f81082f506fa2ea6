// Loaded with `node --require` into the conformance suite. The suite has no option for an
// Authorization header, so every request it makes to the server under test (the origin in
// CONSOLE_BRIDGE_CONFORMANCE_ORIGIN) carries `Authorization: Bearer $CONSOLE_BRIDGE_CONFORMANCE_TOKEN`,
// unless the request sets its own. The suite sends through the global fetch (its MCP SDK client)
// through undici's `request` (dns-rebinding-protection) and through node:http's `request` (the raw
// header checks of http-header-validation): all three are wrapped.
'use strict';
const path = require('node:path');

const origin = process.env.CONSOLE_BRIDGE_CONFORMANCE_ORIGIN;
const token = process.env.CONSOLE_BRIDGE_CONFORMANCE_TOKEN;

function ours(url) {
  try {
    return new URL(String(url)).origin === origin;
  } catch {
    return false;
  }
}

if (origin && token) {
  const bearer = `Bearer ${token}`;
  const fetch = globalThis.fetch;
  globalThis.fetch = function fetchWithBearer(input, init) {
    const url = typeof input === 'string' || input instanceof URL ? input : input.url;
    if (!ours(url)) return fetch(input, init);
    const base = init && init.headers !== undefined ? init.headers : input instanceof Request ? input.headers : undefined;
    const headers = new Headers(base);
    if (!headers.has('authorization')) headers.set('authorization', bearer);
    return fetch(input, { ...(init || {}), headers });
  };

  // The suite's own copy of undici (the ESM `import {request} from "undici"` reads this export).
  const suite = path.join(__dirname, 'node_modules', '@modelcontextprotocol', 'conformance');
  const undici = require(require.resolve('undici', { paths: [suite] }));
  const request = undici.request;
  undici.request = function requestWithBearer(url, options) {
    if (!ours(url)) return request(url, options);
    const headers = { ...((options && options.headers) || {}) };
    if (!Object.keys(headers).some((k) => k.toLowerCase() === 'authorization')) headers.authorization = bearer;
    return request(url, { ...(options || {}), headers });
  };

  const http = require('node:http');
  const httpRequest = http.request;
  http.request = function httpRequestWithBearer(options, ...rest) {
    if (options && typeof options === 'object' && !(options instanceof URL)) {
      const url = `http://${options.hostname || options.host || 'localhost'}:${options.port || 80}`;
      const headers = { ...(options.headers || {}) };
      if (ours(url) && !Object.keys(headers).some((k) => k.toLowerCase() === 'authorization')) {
        headers.authorization = bearer;
        return httpRequest({ ...options, headers }, ...rest);
      }
    }
    return httpRequest(options, ...rest);
  };
}
