// Small helpers shared by the serve tests and the standalone load generator.
import { readFileSync } from 'node:fs';

// A sanitizer build runs the server several times slower; the build sets
// HALO_TEST_SLOWDOWN (cmake/HaloSanitizers.cmake: 3 under ASan, 10 under
// TSan) and the end-to-end tests multiply their waits and latency bounds by it.
export const SLOWDOWN = Number(process.env.HALO_TEST_SLOWDOWN) || 1;
export const scaled = (ms) => ms * SLOWDOWN;

export function rssKiB(pid) {
  const status = readFileSync(`/proc/${pid}/status`, 'utf8');
  const get = (key) => Number((status.match(new RegExp(`${key}:\\s+(\\d+) kB`)) || [0, NaN])[1]);
  return { rss: get('VmRSS'), hwm: get('VmHWM') };
}

export function percentile(values, p) {
  if (!values.length) return NaN;
  const v = [...values].sort((a, b) => a - b);
  return v[Math.min(v.length - 1, Math.round((p / 100) * (v.length - 1)))];
}
