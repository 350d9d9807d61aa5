// A minimal streaming client on node:http (one connection per request, so a
// test can drop it), recording when each SSE event arrives.
import http from 'node:http';

const agent = new http.Agent({ keepAlive: false, maxSockets: Infinity });

// POSTs `body` to `url` and reads the SSE stream. Options:
//   dropAfter: destroy the connection after this many data events
//   timeoutMs: fail if the stream has not ended by then
// Resolves {status, events: [{t, data}], done, dropped, error, t0}.
export function streamRequest(url, body, { dropAfter = 0, timeoutMs = 120000, headers = {} } = {}) {
  return new Promise((resolve) => {
    const t0 = performance.now();
    const out = { status: 0, events: [], done: false, dropped: false, error: null, t0 };
    let settled = false;
    const finish = () => {
      if (settled) return;
      settled = true;
      clearTimeout(timer);
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
      res.setEncoding('utf8');
      let buf = '';
      res.on('data', (d) => {
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
