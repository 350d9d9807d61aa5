// Load generator for halo serve: N concurrent streaming completions (all at
// once), reporting requests/s, TTFT, inter-token latency and end-to-end
// latency percentiles, and the server's resident memory.
//
//   node tests/serve/load.mjs --url http://127.0.0.1:8000 [--requests 1000] [--max-tokens 16] [--pid PID]
//
// Used by load.test.mjs (which starts its own server) with a bounded size.
import { percentile, rssKiB, scaled } from './util.mjs';
import { streamRequest } from './sse_client.mjs';

export async function runLoad({ url, requests = 1000, maxTokens = 8, pid = 0, model = undefined }) {
  let peakRss = 0;
  const sampler = pid ? setInterval(() => {
    try { peakRss = Math.max(peakRss, rssKiB(pid).rss); } catch { /* exited */ }
  }, 50) : null;
  const t0 = performance.now();
  const jobs = [];
  for (let i = 0; i < requests; i++) {
    const body = { prompt: `The package number ${i} is`, stream: true, max_tokens: maxTokens, ignore_eos: true,
      temperature: 0.8, seed: i, stream_options: { include_usage: true } };
    if (model) body.model = model;
    jobs.push(streamRequest(`${url}/v1/completions`, body, { timeoutMs: scaled(180000) }));
  }
  const results = await Promise.all(jobs);
  const seconds = (performance.now() - t0) / 1000;
  if (sampler) clearInterval(sampler);
  const ttft = [];
  const itl = [];
  const e2e = [];
  const errors = [];
  let tokens = 0;
  for (const [i, r] of results.entries()) {
    const usage = r.events.length ? safeParse(r.events.at(-1).data)?.usage : undefined;
    if (r.status !== 200 || r.error || !r.done || !usage) {
      errors.push(`request ${i}: status ${r.status} ${r.error ?? ''} done=${r.done}`);
      continue;
    }
    tokens += usage.completion_tokens;
    const textEvents = r.events.slice(0, -1);
    if (!textEvents.length) continue;
    ttft.push(textEvents[0].t - r.t0);
    for (let k = 1; k < textEvents.length; k++) itl.push(textEvents[k].t - textEvents[k - 1].t);
    e2e.push(r.events.at(-1).t - r.t0);
  }
  const stats = (v) => ({ p50: percentile(v, 50), p99: percentile(v, 99), mean: v.reduce((a, b) => a + b, 0) / (v.length || 1) });
  return {
    requests,
    completed: requests - errors.length,
    errors,
    seconds,
    requests_per_s: (requests - errors.length) / seconds,
    output_tokens: tokens,
    output_tokens_per_s: tokens / seconds,
    ttft_ms: stats(ttft),
    itl_ms: stats(itl),
    e2e_ms: stats(e2e),
    peak_rss_mib: peakRss / 1024,
    hwm_rss_mib: pid ? rssKiB(pid).hwm / 1024 : NaN,
  };
}

function safeParse(s) {
  try { return JSON.parse(s); } catch { return null; }
}

export function formatReport(r) {
  const f = (x) => (Number.isFinite(x) ? x.toFixed(1) : 'n/a');
  return [
    `requests: ${r.completed}/${r.requests} ok in ${f(r.seconds)} s (${f(r.requests_per_s)} req/s, ` +
      `${f(r.output_tokens_per_s)} output tok/s, ${r.output_tokens} tokens)`,
    `TTFT ms: p50 ${f(r.ttft_ms.p50)}  p99 ${f(r.ttft_ms.p99)}  mean ${f(r.ttft_ms.mean)}`,
    `ITL  ms: p50 ${f(r.itl_ms.p50)}  p99 ${f(r.itl_ms.p99)}  mean ${f(r.itl_ms.mean)}`,
    `E2E  ms: p50 ${f(r.e2e_ms.p50)}  p99 ${f(r.e2e_ms.p99)}`,
    `server RSS: peak sampled ${f(r.peak_rss_mib)} MiB, VmHWM ${f(r.hwm_rss_mib)} MiB`,
  ].join('\n');
}

if (import.meta.url === `file://${process.argv[1]}`) {
  const arg = (name, def) => {
    const i = process.argv.indexOf(`--${name}`);
    return i > 0 ? process.argv[i + 1] : def;
  };
  const url = arg('url', 'http://127.0.0.1:8000');
  const r = await runLoad({ url, requests: Number(arg('requests', 1000)), maxTokens: Number(arg('max-tokens', 16)),
    pid: Number(arg('pid', 0)), model: arg('model', undefined) });
  console.log(formatReport(r));
  if (r.errors.length) {
    console.log(r.errors.slice(0, 10).join('\n'));
    process.exitCode = 1;
  }
}
