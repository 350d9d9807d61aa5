// halo serve's web page (ui/) in a real browser: Chromium driven by
// playwright-core against the real binary. The page is the built-in copy,
// or ui/ on disk when HALO_UI_DIR is set (`--ui-dir`). Every page fails its
// test on any console error or uncaught exception; each view leaves a
// screenshot in HALO_TEST_ARTIFACTS.
import assert from 'node:assert/strict';
import { existsSync, mkdirSync, readdirSync, readFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import os from 'node:os';
import path from 'node:path';
import { after, afterEach, before, describe, test } from 'node:test';
import { fileURLToPath } from 'node:url';

import { JS_DIR, metric, metrics, postJson, sleep, startServer } from '../serve/lib.mjs';
import { scaled } from '../serve/util.mjs';

const REPO = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..', '..');
const UI = path.join(REPO, 'ui');
const PKGCHAT = path.join(REPO, 'models', 'pkgchat-5m');
const CHROMIUM = process.env.HALO_CHROMIUM || '/usr/bin/chromium';
const ARTIFACTS = process.env.HALO_TEST_ARTIFACTS || path.join(os.tmpdir(), 'halo-ui-artifacts');
const UI_ARGS = process.env.HALO_UI_DIR ? ['--ui-dir', process.env.HALO_UI_DIR] : [];
// One compute thread per model: on a small machine the browser needs a core
// too, or it gets the streams in bursts.
const MODELS = ['--model', `a=${PKGCHAT}`, '--model', `b=${PKGCHAT}`, '--threads', '1'];
const DESKTOP = { viewport: { width: 1280, height: 800 } };
const PHONE = { viewport: { width: 390, height: 844 }, isMobile: true, hasTouch: true, deviceScaleFactor: 2 };

// Greedy answers of the demo model, measured: 'Explain tar in detail.' runs
// to ~240 tokens, 'Write a long story about a cat.' to ~320: long enough to
// be seen streaming and to be stopped half way.
const PROMPT = 'Explain tar in detail.';
const LONG_PROMPT = 'Write a long story about a cat.';
const SYSTEM = 'You describe Debian packages.';

function loadPlaywright() {
  const pkg = path.join(JS_DIR, 'node_modules', 'playwright-core');
  assert.ok(existsSync(pkg), `playwright-core is missing from ${JS_DIR}/node_modules: run scripts/install-deps.sh --test`);
  return createRequire(path.join(JS_DIR, 'package.json'))('playwright-core');
}

let browser;
const openContexts = [];

before(async () => {
  // Fail, do not skip: the page is part of what halo ships.
  assert.ok(existsSync(CHROMIUM),
    `no Chromium at ${CHROMIUM} (HALO_CHROMIUM): scripts/install-deps.sh --test installs chromium`);
  mkdirSync(ARTIFACTS, { recursive: true });
  const { chromium } = loadPlaywright();
  browser = await chromium.launch({ executablePath: CHROMIUM, args: ['--no-sandbox'] });
});

after(async () => {
  await browser?.close();
});

afterEach(async () => {
  // A test that failed half way leaves its page open: close it here.
  while (openContexts.length) await openContexts.pop().close().catch(() => {});
});

// A fresh page on `server`, collecting console errors and page exceptions.
// `expected(message)` names console errors the test causes on purpose.
async function openPage(server, { device = DESKTOP, expected = () => false } = {}) {
  const context = await browser.newContext(device);
  openContexts.push(context);
  const page = await context.newPage();
  page.setDefaultTimeout(scaled(15000));
  const errors = [];
  const allowed = [];
  page.on('console', (m) => {
    if (m.type() !== 'error') return;
    const entry = `console error: ${m.text()} (${m.location().url})`;
    (expected(m) ? allowed : errors).push(entry);
  });
  page.on('pageerror', (e) => errors.push(`page error: ${e.message}\n${e.stack}`));
  await page.goto(`${server.url}/`);
  return { page, errors, allowed };
}

function assertNoErrors(view) {
  assert.deepEqual(view.errors, [], 'the page logged errors');
}

async function screenshot(page, name) {
  await page.screenshot({ path: path.join(ARTIFACTS, name) });
}

async function waitForModels(page) {
  await page.waitForFunction(() => document.getElementById('model-a').options.length > 0);
}

// Sets the sampling fields in the settings drop-down, then closes it.
async function setSettings(page, values) {
  await page.click('#settings > summary');
  for (const [id, value] of Object.entries(values)) await page.fill(`#${id}`, String(value));
  await page.click('#settings > summary');
}

const answerOf = (pane) => `.pane[data-pane="${pane}"] .msg.assistant`;

async function statOf(page, pane, name) {
  const e = page.locator(`${answerOf(pane)} .stats [data-stat="${name}"]`).last();
  return { text: (await e.textContent()).trim(), value: Number(await e.getAttribute('data-value')) };
}

// Sum of a metric over every series whose labels include `label`.
function metricSum(m, name, label = '') {
  let s = 0;
  for (const [k, v] of Object.entries(m)) if (k.startsWith(`${name}{`) && k.includes(label)) s += v;
  return s;
}

async function waitUntil(what, cond, timeoutMs = scaled(10000), detail = () => '') {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    if (await cond()) return;
    if (Date.now() > deadline) assert.fail(`timed out waiting for ${what} ${detail()}`);
    await sleep(50);
  }
}

describe('two models on one server', () => {
  let server;

  before(async () => {
    server = await startServer([...MODELS, ...UI_ARGS]);
  });

  after(async () => {
    if (!server) return;
    const { code } = await server.stop();
    assert.equal(code, 0, `halo serve exited ${code}:\n${server.stderr}`);
  });

  test('serves the page and every file of ui/, byte for byte, with its CSP', async () => {
    const index = await fetch(`${server.url}/`);
    assert.equal(index.status, 200);
    assert.match(index.headers.get('content-type'), /^text\/html/);
    assert.match(index.headers.get('content-security-policy'), /script-src 'self'/);
    assert.deepEqual(Buffer.from(await index.arrayBuffer()), readFileSync(path.join(UI, 'index.html')));
    for (const name of readdirSync(UI)) {
      const r = await fetch(`${server.url}/ui/${name}`);
      assert.equal(r.status, 200, name);
      assert.deepEqual(Buffer.from(await r.arrayBuffer()), readFileSync(path.join(UI, name)), `${name} differs from ui/`);
    }
    assert.equal((await fetch(`${server.url}/ui/no-such-file.js`)).status, 404);
  });

  test('chat: streamed tokens, stats, and the same text as the server answers', async () => {
    const view = await openPage(server);
    const { page } = view;
    await waitForModels(page);
    await setSettings(page, { temperature: 0, 'max-tokens': 200 });
    // The lengths of the answer's text while it streams, at every DOM change.
    await page.evaluate(() => {
      window.seen = [];
      const conv = document.querySelector('.pane[data-pane="a"] .conversation');
      new MutationObserver(() => {
        const m = conv.querySelector('.msg.assistant');
        if (m && m.classList.contains('streaming')) window.seen.push(m.querySelector('.text').textContent.length);
      }).observe(conv, { subtree: true, childList: true, characterData: true });
    });
    const before = await metrics(server);
    await page.fill('#prompt', PROMPT);
    await page.press('#prompt', 'Enter');
    await page.waitForSelector(`${answerOf('a')}.done`);
    const after = await metrics(server);
    await screenshot(page, 'chat.png');

    assert.equal(await page.inputValue('#prompt'), '', 'the prompt box empties on send');
    assert.equal(await page.textContent('.pane[data-pane="a"] .msg.user .text'), PROMPT);
    const text = await page.textContent(`${answerOf('a')} .text`);
    const seen = await page.evaluate(() => window.seen);
    const growing = [...new Set(seen.filter((n) => n > 0))];
    assert.ok(growing.length >= 2, `the text should grow while streaming; lengths seen: ${seen}`);
    assert.ok(Math.max(...growing) <= text.length);

    // The same conversation, not streamed, from node: greedy, so the same text.
    const ref = await postJson(`${server.url}/v1/chat/completions`, {
      model: 'a', messages: [{ role: 'user', content: PROMPT }], temperature: 0, top_p: 1, max_tokens: 200,
    });
    assert.equal(ref.status, 200, ref.text);
    assert.equal(text, ref.json.choices[0].message.content);
    assert.ok(ref.json.usage.completion_tokens > 20, 'a long enough answer to see it stream');

    const tokens = await statOf(page, 'a', 'tokens');
    assert.equal(tokens.value, ref.json.usage.completion_tokens);
    assert.equal(tokens.text, String(tokens.value));
    const generated = metric(after, 'vllm:generation_tokens_total', 'model_name="a"')
      - metric(before, 'vllm:generation_tokens_total', 'model_name="a"');
    assert.equal(tokens.value, generated, 'the token count is the server\'s');
    const ttft = await statOf(page, 'a', 'ttft');
    assert.match(ttft.text, /^\d+ ms$/);
    assert.ok(ttft.value > 0 && ttft.value < scaled(5000), `ttft ${ttft.value}`);
    const tps = await statOf(page, 'a', 'tps');
    assert.ok(tps.value > 0 && Number(tps.text) > 0, `tps ${tps.text}`);
    assert.match(await page.textContent(`${answerOf('a')} .stats`), /decode tok\/s/);
    assertNoErrors(view);
  });

  test('the stop button ends a long answer and the server aborts it', async () => {
    const view = await openPage(server);
    const { page } = view;
    await waitForModels(page);
    await setSettings(page, { temperature: 0, 'max-tokens': 400 });
    const full = await postJson(`${server.url}/v1/chat/completions`, {
      model: 'a', messages: [{ role: 'user', content: LONG_PROMPT }], temperature: 0, max_tokens: 400,
    });
    const fullTokens = full.json.usage.completion_tokens;
    assert.ok(fullTokens > 100, `the long answer has ${fullTokens} tokens`);
    // Click Stop the moment the first tokens show, from inside the page: the
    // demo model is fast, a click from here could come after the end.
    await page.evaluate(() => {
      const conv = document.querySelector('.pane[data-pane="a"] .conversation');
      const watch = new MutationObserver(() => {
        const t = conv.querySelector('.msg.assistant .text');
        if (t && t.textContent.length > 0) {
          watch.disconnect();
          document.getElementById('stop').click();
        }
      });
      watch.observe(conv, { subtree: true, childList: true, characterData: true });
    });
    const abortLabel = 'finished_reason="abort"';
    const abortsBefore = metricSum(await metrics(server), 'vllm:request_success_total', abortLabel);
    await page.fill('#prompt', LONG_PROMPT);
    await page.click('#send');
    await page.waitForSelector(`${answerOf('a')}.stopped`);
    const stopped = await page.textContent(`${answerOf('a')} .text`);
    assert.ok(stopped.length > 0, 'the partial answer stays');
    assert.equal(await page.textContent(`${answerOf('a')} .note`), 'stopped');
    const tokens = await statOf(page, 'a', 'tokens');
    assert.ok(tokens.value < fullTokens, `stopped after ${tokens.value} of ${fullTokens} tokens`);
    await sleep(scaled(500));
    assert.equal(await page.textContent(`${answerOf('a')} .text`), stopped, 'no text after the stop');
    assert.equal(await page.isDisabled('#stop'), true);
    assert.equal(await page.isEnabled('#send'), true);
    let m;
    await waitUntil('the server to abort the request', async () => {
      m = await metrics(server);
      return metricSum(m, 'vllm:num_requests_running') === 0
        && metricSum(m, 'vllm:request_success_total', abortLabel) === abortsBefore + 1;
    }, scaled(10000), () => `aborts before ${abortsBefore}, tokens ${tokens.value}, now ${JSON.stringify(m)}`);
    // The conversation goes on after a stop.
    await page.fill('#prompt', 'What is curl?');
    await page.click('#send');
    await page.waitForSelector(`${answerOf('a')}.done`);
    assert.equal(await page.locator(answerOf('a')).count(), 2);
    assertNoErrors(view);
  });

  test('side by side: one message to two models, streamed at the same time', async () => {
    const view = await openPage(server);
    const { page } = view;
    await waitForModels(page);
    assert.equal(await page.isVisible('#model-b'), false);
    assert.equal(await page.isVisible('.pane[data-pane="b"]'), false);
    await page.check('#side-by-side');
    assert.equal(await page.isVisible('#model-b'), true);
    assert.equal(await page.isVisible('.pane[data-pane="b"]'), true);
    assert.deepEqual(await page.$$eval('#model-a option', (os) => os.map((o) => o.value)), ['a', 'b']);
    assert.equal(await page.inputValue('#model-a'), 'a');
    assert.equal(await page.inputValue('#model-b'), 'b', 'B defaults to the second model');
    await setSettings(page, { temperature: 0, 'top-p': 0.9, 'max-tokens': 300, 'system-prompt': SYSTEM });
    // Both requests leave before either answer is complete: two streams at
    // once. (Whether the tokens then arrive interleaved depends on the
    // machine: on two cores the browser may get the second stream in one
    // piece after the first.)
    const events = [];
    const bodies = [];
    const isChat = (r) => r.url().endsWith('/v1/chat/completions');
    page.on('request', (r) => {
      if (!isChat(r)) return;
      bodies.push(JSON.parse(r.postData()));
      events.push(`sent ${bodies.at(-1).model}`);
    });
    page.on('requestfinished', (r) => isChat(r) && events.push('finished'));
    const before = await metrics(server);
    await page.fill('#prompt', PROMPT);
    await page.click('#send');
    await page.waitForSelector(`${answerOf('a')}.done`);
    await page.waitForSelector(`${answerOf('b')}.done`);
    const after = await metrics(server);
    await screenshot(page, 'side-by-side.png');

    for (const id of ['a', 'b']) {
      assert.equal(await page.textContent(`.pane[data-pane="${id}"] .msg.user .text`), PROMPT);
      assert.ok((await page.textContent(`${answerOf(id)} .text`)).length > 0, `pane ${id} answered`);
      const tokens = await statOf(page, id, 'tokens');
      const generated = metric(after, 'vllm:generation_tokens_total', `model_name="${id}"`)
        - metric(before, 'vllm:generation_tokens_total', `model_name="${id}"`);
      assert.equal(generated, tokens.value, `model ${id} generated pane ${id}'s answer`);
      const ok = metricSum(after, 'vllm:request_success_total', `model_name="${id}"`)
        - metricSum(before, 'vllm:request_success_total', `model_name="${id}"`);
      assert.equal(ok, 1, `one request finished on model ${id}`);
    }
    await waitUntil('both requests to finish', () => events.length === 4);
    assert.deepEqual(events.slice(0, 2).sort(), ['sent a', 'sent b'], `both sent at once: ${events}`);
    // The same conversation and settings to both, streamed with usage.
    for (const body of bodies) {
      assert.deepEqual({ ...body, model: undefined }, {
        model: undefined,
        messages: [{ role: 'system', content: SYSTEM }, { role: 'user', content: PROMPT }],
        stream: true, stream_options: { include_usage: true }, temperature: 0, top_p: 0.9, max_tokens: 300,
      });
    }
    assertNoErrors(view);
  });

  test('live panel: running requests, KV cache, tokens/s and its chart follow the load', async () => {
    const view = await openPage(server);
    const { page } = view;
    await page.waitForFunction(() => document.getElementById('live-status').textContent === 'live');
    assert.equal(await page.textContent('#live-running'), '0');
    assert.ok(await page.locator('#live-spec-stat').isHidden(), 'no speculation stat without speculative decoding');
    // Eight streams kept in flight from node, four per model.
    let loading = true;
    let sent = 0;
    const worker = async (model) => {
      while (loading) {
        const r = await fetch(`${server.url}/v1/chat/completions`, {
          method: 'POST',
          headers: { 'Content-Type': 'application/json' },
          body: JSON.stringify({
            model, messages: [{ role: 'user', content: 'What is curl?' }], stream: true, max_tokens: 300, ignore_eos: true,
          }),
        });
        await r.text();
        sent += 1;
      }
    };
    const workers = Array.from({ length: 8 }, (_, i) => worker(i % 2 ? 'b' : 'a'));
    try {
      // The most the panel showed: more than 4 running is only possible summed over both models.
      await page.waitForFunction(() => {
        const num = (id) => Number.parseFloat(document.getElementById(id).textContent) || 0;
        const m = (window.most ??= { running: 0, tps: 0, kv: 0 });
        m.running = Math.max(m.running, num('live-running'));
        m.tps = Math.max(m.tps, num('live-tps'));
        m.kv = Math.max(m.kv, num('live-kv'));
        const points = document.querySelector('#live-chart polyline').getAttribute('points').trim().split(/\s+/);
        return m.running > 4 && m.tps > 0 && m.kv > 0 && points.length > 2;
      }, null, { polling: 100, timeout: scaled(30000) });
      await screenshot(page, 'live.png');
    } finally {
      loading = false;
      await Promise.all(workers);
    }
    assert.ok(sent >= 8);
    assert.match(await page.textContent('#live-kv'), /^\d+\.\d%$/);
    assert.match(await page.textContent('#live-tps'), /^\d+(\.\d)?$/);
    // The chart: a line over more than one sample, some of them above zero.
    const points = (await page.getAttribute('#live-chart polyline', 'points')).trim().split(/\s+/)
      .map((p) => p.split(',').map(Number));
    assert.ok(points.length > 2, `points: ${points}`);
    assert.ok(points.every(([x, y]) => x >= 0 && x <= 240 && y >= 0 && y <= 80), `points: ${points}`);
    assert.ok(new Set(points.map(([, y]) => y)).size > 1, 'the line rises with the load');
    assert.notEqual(await page.getAttribute('#live-chart path', 'd'), '');
    // Once the load is over the panel goes back to idle.
    await page.waitForFunction(() => document.getElementById('live-running').textContent === '0'
      && document.getElementById('live-tps').textContent === '0.0', null, { timeout: scaled(10000) });
    assertNoErrors(view);
  });

  test('phone width: no sideways scrolling, the prompt at hand, a chat works', async () => {
    const view = await openPage(server, { device: PHONE });
    const { page } = view;
    await waitForModels(page);
    const fits = () => page.evaluate(() => ({
      page: document.documentElement.scrollWidth, body: document.body.scrollWidth, window: window.innerWidth,
    }));
    const assertFits = async (what) => {
      const w = await fits();
      assert.ok(w.page <= w.window && w.body <= w.window, `${what}: ${JSON.stringify(w)}`);
    };
    await assertFits('at load');
    for (const sel of ['#prompt', '#send', '#stop', '#model-a', '#side-by-side', '#live-running']) {
      assert.ok(await page.isVisible(sel), `${sel} visible`);
      const box = await page.locator(sel).boundingBox();
      assert.ok(box.x >= 0 && box.x + box.width <= 390 && box.y >= 0 && box.y + box.height <= 844,
        `${sel} inside the screen: ${JSON.stringify(box)}`);
    }
    // Short answers: the second turn of side by side still fits the demo
    // model's 512 tokens of context.
    await setSettings(page, { 'max-tokens': 100 });
    await page.fill('#prompt', PROMPT);
    await page.tap('#send');
    await page.waitForSelector(`${answerOf('a')}.done`);
    assert.ok((await page.textContent(`${answerOf('a')} .text`)).length > 0);
    await assertFits('after an answer');
    await screenshot(page, 'phone.png');
    await page.tap('#settings > summary');
    assert.ok(await page.isVisible('#system-prompt'));
    await assertFits('settings open');
    await screenshot(page, 'phone-settings.png');
    await page.tap('#settings > summary');
    await page.check('#side-by-side');
    await page.fill('#prompt', 'What is vim?');
    await page.tap('#send');
    await page.waitForSelector(`${answerOf('b')}.done`);
    await page.waitForFunction(() => document.querySelectorAll('.msg.assistant.streaming').length === 0);
    await assertFits('side by side');
    assert.ok(await page.isVisible('#send'));
    await screenshot(page, 'phone-side-by-side.png');
    assertNoErrors(view);
  });
});

describe('a server with --api-key', () => {
  const KEY = 'sekrit';
  let server;

  before(async () => {
    server = await startServer(['--model', `a=${PKGCHAT}`, '--threads', '1', '--api-key', KEY, ...UI_ARGS]);
  });

  after(async () => {
    await server?.stop();
  });

  test('asks for the key, refuses a wrong one, keeps the right one in the page only', async () => {
    // Chromium logs every 401 answer as a console error: exactly the two the
    // page asks for (no key, then the wrong one) are expected.
    const expected = (m) => /status of 401/.test(m.text()) && m.location().url === `${server.url}/v1/models`;
    const view = await openPage(server, { expected });
    const { page } = view;
    await page.waitForSelector('#api-key-form', { state: 'visible' });
    assert.equal(await page.locator('#model-a option').count(), 0);
    assert.equal(await page.isVisible('#api-key-error'), false);
    assert.equal(await page.getAttribute('#api-key', 'type'), 'password');
    await screenshot(page, 'api-key.png');

    await page.fill('#api-key', 'wrong');
    await page.press('#api-key', 'Enter');
    await page.waitForSelector('#api-key-error', { state: 'visible' });
    assert.match(await page.textContent('#api-key-error'), /refused/);
    assert.ok(await page.isVisible('#api-key-form'), 'the form stays open');
    await screenshot(page, 'api-key-wrong.png');

    await page.fill('#api-key', KEY);
    await page.click('#api-key-form button[type="submit"]');
    await page.waitForSelector('#api-key-form', { state: 'hidden' });
    await waitForModels(page);
    assert.deepEqual(await page.$$eval('#model-a option', (os) => os.map((o) => o.value)), ['a']);
    assert.equal(await page.inputValue('#api-key'), '', 'the key is not left in the form');

    const auth = [];
    page.on('request', (r) => r.url().includes('/v1/') && auth.push(r.headers().authorization));
    await page.fill('#prompt', 'What is curl?');
    await page.press('#prompt', 'Enter');
    await page.waitForSelector(`${answerOf('a')}.done`);
    assert.ok((await page.textContent(`${answerOf('a')} .text`)).length > 0);
    assert.deepEqual(auth, [`Bearer ${KEY}`], 'the chat request carries the key');

    const stored = await page.evaluate(() => JSON.stringify({
      local: { ...localStorage }, session: { ...sessionStorage }, cookie: document.cookie,
    }));
    assert.ok(!stored.includes(KEY), `the key was stored: ${stored}`);
    assert.equal(view.allowed.length, 2, view.allowed.join('\n'));
    assertNoErrors(view);
  });

  test('the live panel says when the server is gone', async () => {
    // The page's failed polls: Chromium logs each refused connection (and
    // the 401 of /v1/models without a key).
    const expected = (m) => /ERR_CONNECTION_REFUSED|status of 401/.test(m.text());
    const view = await openPage(server, { expected });
    const { page } = view;
    await page.waitForFunction(() => document.getElementById('live-status').textContent === 'live');
    const { code } = await server.stop();
    assert.equal(code, 0, `halo serve exited ${code}:\n${server.stderr}`);
    await page.waitForFunction(() => document.getElementById('live-status').textContent === 'server unreachable',
      null, { timeout: scaled(10000) });
    assert.ok(await page.evaluate(() => document.getElementById('live').classList.contains('down')));
    assertNoErrors(view);
  });
});

describe('a server with speculative decoding', () => {
  test('the live panel shows the acceptance rate and mean accepted length /metrics gives', async () => {
    const spec = JSON.stringify({ method: 'ngram', num_speculative_tokens: 4, prompt_lookup_max: 3, prompt_lookup_min: 1 });
    const server = await startServer(['--model', `a=${PKGCHAT}`, '--speculative-config', spec, ...UI_ARGS]);
    try {
      const view = await openPage(server);
      const { page } = view;
      await page.waitForFunction(() => document.getElementById('live-status').textContent === 'live');
      await page.waitForFunction(() => !document.getElementById('live-spec-stat').hidden);
      const r = await postJson(`${server.url}/v1/completions`,
        { model: 'a', prompt: 'apt install apt install apt install', max_tokens: 64, temperature: 0, ignore_eos: true });
      assert.equal(r.status, 200, r.text);
      const m = await metrics(server);
      const drafts = metric(m, 'vllm:spec_decode_num_drafts_total');
      const proposed = metric(m, 'vllm:spec_decode_num_draft_tokens_total');
      const accepted = metric(m, 'vllm:spec_decode_num_accepted_tokens_total');
      assert.ok(drafts > 0 && accepted > 0, `drafts ${drafts}, accepted ${accepted}`);
      const want = `${((100 * accepted) / proposed).toFixed(0)}% · ${(1 + accepted / drafts).toFixed(2)}`;
      await waitUntil('the speculation stat', async () => (await page.textContent('#live-spec')) === want,
        scaled(10000), () => `(want ${want})`);
      await screenshot(page, 'live-speculation.png');
      assertNoErrors(view);
    } finally {
      const { code } = await server.stop();
      assert.equal(code, 0, `halo serve exited ${code}:\n${server.stderr}`);
    }
  });
});

describe('--no-ui', () => {
  test('no page at / while the API still answers', async () => {
    const server = await startServer(['--model', `a=${PKGCHAT}`, '--no-ui']);
    try {
      assert.equal((await fetch(`${server.url}/`)).status, 404);
      assert.equal((await fetch(`${server.url}/ui/app.js`)).status, 404);
      const models = await fetch(`${server.url}/v1/models`);
      assert.equal(models.status, 200);
      assert.deepEqual((await models.json()).data.map((m) => m.id), ['a']);
    } finally {
      const { code } = await server.stop();
      assert.equal(code, 0, `halo serve exited ${code}:\n${server.stderr}`);
    }
  });
});
