// The live panel: polls GET /metrics (Prometheus text, no key needed) every
// second and shows the server's load, summed over the served models.

const POLL_MS = 1000;
const WINDOW_MS = 60000;
const SVG_NS = 'http://www.w3.org/2000/svg';
const CHART_W = 240;
const CHART_H = 80;
const CHART_PAD = 4;

// Prometheus text -> Map(name -> [values]), one value per label set.
// Lines are `name{labels} value [timestamp]`; `#` lines are comments.
export function parseMetrics(text) {
  const out = new Map();
  for (const line of text.split('\n')) {
    if (!line || line.startsWith('#')) continue;
    const m = /^([A-Za-z_:][\w:]*)(?:\{.*\})?\s+(\S+)/.exec(line);
    if (!m) continue;
    const value = Number(m[2]);
    if (Number.isNaN(value)) continue;
    if (!out.has(m[1])) out.set(m[1], []);
    out.get(m[1]).push(value);
  }
  return out;
}

const sum = (values) => (values ? values.reduce((a, b) => a + b, 0) : null);
const max = (values) => (values && values.length ? Math.max(...values) : null);

function formatRate(rate) {
  return rate >= 100 ? rate.toFixed(0) : rate.toFixed(1);
}

// The chart's elements, built once: an area under the line, and the line.
function buildChart(svg) {
  const base = document.createElementNS(SVG_NS, 'line');
  base.setAttribute('class', 'chart-base');
  base.setAttribute('x1', '0');
  base.setAttribute('x2', String(CHART_W));
  base.setAttribute('y1', String(CHART_H - CHART_PAD));
  base.setAttribute('y2', String(CHART_H - CHART_PAD));
  const area = document.createElementNS(SVG_NS, 'path');
  area.setAttribute('class', 'chart-area');
  const line = document.createElementNS(SVG_NS, 'polyline');
  line.setAttribute('class', 'chart-line');
  line.setAttribute('points', '');
  svg.append(base, area, line);
  return { area, line };
}

class LivePanel {
  constructor() {
    const $ = (id) => document.getElementById(id);
    this.els = {
      panel: $('live'), status: $('live-status'), running: $('live-running'), waiting: $('live-waiting'),
      kv: $('live-kv'), kvBar: $('live-kv-bar'), tps: $('live-tps'), peak: $('live-peak'),
      specStat: $('live-spec-stat'), spec: $('live-spec'),
    };
    this.chart = buildChart($('live-chart'));
    this.prev = null;     // last sample of the generated-tokens counter {t, total}
    this.points = [];     // [{t, rate}] of the last minute
  }

  async poll() {
    let text;
    try {
      const r = await fetch('/metrics', { cache: 'no-store' });
      if (!r.ok) throw new Error(`HTTP ${r.status}`);
      text = await r.text();
    } catch (e) {
      this.unreachable(e);
      return;
    }
    this.show(parseMetrics(text), performance.now());
  }

  unreachable(e) {
    // A warning once when the server goes away, not one a second.
    if (!this.els.panel.classList.contains('down')) console.warn(`halo: /metrics: ${e.message}`);
    this.els.panel.classList.add('down');
    this.els.status.textContent = 'server unreachable';
  }

  show(metrics, now) {
    const { els } = this;
    els.panel.classList.remove('down');
    els.status.textContent = 'live';
    const running = sum(metrics.get('vllm:num_requests_running'));
    const waiting = sum(metrics.get('vllm:num_requests_waiting'));
    const kv = max(metrics.get('vllm:kv_cache_usage_perc'));
    els.running.textContent = running === null ? '–' : String(running);
    els.waiting.textContent = waiting === null ? '–' : String(waiting);
    els.kv.textContent = kv === null ? '–' : `${(kv * 100).toFixed(1)}%`;
    els.kvBar.style.width = `${Math.min(100, Math.max(0, (kv || 0) * 100))}%`;
    this.addSample(sum(metrics.get('vllm:generation_tokens_total')), now);
    this.showSpeculation(metrics);
    this.draw(now);
  }

  // Speculative decoding, when a model uses it: the acceptance rate and the
  // mean tokens per verify, as vLLM derives them from its counters.
  showSpeculation(metrics) {
    const drafts = sum(metrics.get('vllm:spec_decode_num_drafts_total'));
    const proposed = sum(metrics.get('vllm:spec_decode_num_draft_tokens_total'));
    const accepted = sum(metrics.get('vllm:spec_decode_num_accepted_tokens_total'));
    this.els.specStat.hidden = drafts === null;
    if (drafts === null) return;
    this.els.spec.textContent = proposed > 0
      ? `${((100 * accepted) / proposed).toFixed(0)}% · ${(1 + accepted / drafts).toFixed(2)}`
      : '–';
  }

  // The rate between two samples of the counter; a restarted server resets
  // the counter, and a negative step counts as no tokens.
  addSample(total, now) {
    if (total === null) return;
    if (this.prev) {
      const rate = Math.max(0, total - this.prev.total) / ((now - this.prev.t) / 1000);
      this.points.push({ t: now, rate });
      this.els.tps.textContent = formatRate(rate);
    }
    this.prev = { t: now, total };
    this.points = this.points.filter((p) => p.t >= now - WINDOW_MS);
  }

  draw(now) {
    const peak = Math.max(0, ...this.points.map((p) => p.rate));
    const top = Math.max(peak, 1);
    const xy = this.points.map((p) => {
      const x = ((p.t - (now - WINDOW_MS)) / WINDOW_MS) * CHART_W;
      const y = CHART_H - CHART_PAD - (p.rate / top) * (CHART_H - 2 * CHART_PAD);
      return `${x.toFixed(1)},${y.toFixed(1)}`;
    });
    this.chart.line.setAttribute('points', xy.join(' '));
    const floor = CHART_H - CHART_PAD;
    this.chart.area.setAttribute('d', xy.length > 1
      ? `M${xy[0].split(',')[0]},${floor} L${xy.join(' L')} L${xy[xy.length - 1].split(',')[0]},${floor} Z`
      : '');
    this.els.peak.textContent = peak > 0 ? `peak ${formatRate(peak)} tok/s` : '';
  }
}

// Starts polling; one request at a time, a second apart.
export function startLive() {
  const panel = new LivePanel();
  const loop = async () => {
    await panel.poll();
    setTimeout(loop, POLL_MS);
  };
  loop();
}
