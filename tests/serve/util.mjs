// Small helpers shared by the serve tests and the standalone load generator.
import { readFileSync } from 'node:fs';

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
