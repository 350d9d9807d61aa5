// A minimal streaming client on node:http (one connection per request, so a
// test can drop it), recording when each SSE event arrives.
import http from 'node:http';

const agent = new http.Agent({ keepAlive: false, maxSockets: Infinity });

// POSTs `body` to `url` and reads the SSE stream. Options:
//   dropAfter: destroy the connection after this many data events
//   timeoutMs: fail if the stream has not ended by then
//   into: an object to fill in place (so a caller can watch it while it runs)
// Resolves {status, headers (the response's), events: [{t, data}], done,
// dropped, error, text (a non-200 body), t0, tHeaders, t1}. A stream cut off
// before [DONE] resolves with done false.
export function streamRequest(url, body, { dropAfter = 0, timeoutMs = 120000, headers = {}, into = {} } = {}) {
  return new Promise((resolve) => {
    const t0 = performance.now();
    const out = Object.assign(into, { status: 0, headers: {}, events: [], done: false, dropped: false, error: null,
      text: '', t0, tHeaders: 0, t1: 0 });
    let settled = false;
    const finish = () => {
      if (settled) return;
      settled = true;
      clearTimeout(timer);
      out.t1 = performance.now();
      resolve(out);
    };
    const req = http.request(url, {
      method: 'POST',
      agent,
      headers: { 'Content-Type': 'application/json', ...headers },
    });
    const timer = setTimeout(() => {
      out.error = `timeout after ${timeoutMs} ms`;
      req.destroy();
      finish();
    }, timeoutMs);
    req.on('response', (res) => {
      out.status = res.statusCode;
      out.headers = res.headers;
      out.tHeaders = performance.now();
      res.setEncoding('utf8');
      let buf = '';
      res.on('data', (d) => {
        if (res.statusCode !== 200) {
          out.text += d;
          return;
        }
        buf += d;
        let i;
        while ((i = buf.indexOf('\n\n')) >= 0) {
          const ev = buf.slice(0, i);
          buf = buf.slice(i + 2);
          if (!ev.startsWith('data: ')) {
            out.error = `bad SSE framing: ${JSON.stringify(ev.slice(0, 80))}`;
            continue;
          }
          const data = ev.slice(6);
          if (data === '[DONE]') {
            out.done = true;
            continue;
          }
          out.events.push({ t: performance.now(), data });
          if (dropAfter && out.events.length >= dropAfter && !out.dropped) {
            out.dropped = true;
            req.destroy();
            finish();
            return;
          }
        }
      });
      res.on('end', finish);
      res.on('close', finish);  // a connection cut without 'end' or 'error'
      res.on('error', (e) => {
        if (!out.dropped) out.error = String(e);
        finish();
      });
    });
    req.on('error', (e) => {
      if (!out.dropped) out.error = String(e);
      finish();
    });
    req.end(JSON.stringify(body));
  });
}
