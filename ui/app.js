// halo's web page: chat with the served models (one pane, or two side by
// side getting the same conversation), the sampling settings, and a live
// panel of the server. Plain modules, no build step: the files are served
// as they are (and built into the binary byte for byte).
import { hasApiKey, listModels, setApiKey } from './api.js';
import { streamChat } from './chat.js';
import { AnswerView, userMessage } from './messages.js';
import { startLive } from './live.js';

const $ = (id) => document.getElementById(id);

function makePane(id) {
  const el = document.querySelector(`.pane[data-pane="${id}"]`);
  return {
    id,
    el,
    conversation: el.querySelector('.conversation'),
    title: el.querySelector('.pane-model'),
    select: $(`model-${id}`),
    history: [],  // [{role, content}] of this pane, sent whole each turn
  };
}

const panes = { a: makePane('a'), b: makePane('b') };
const prompt = $('prompt');
const sideBySide = $('side-by-side');
let controller = null;  // the AbortController of the answers in flight

// ---- settings -------------------------------------------------------------

function numberOf(input, fallback) {
  const v = input.valueAsNumber;
  return Number.isFinite(v) ? v : fallback;
}

function sampling() {
  return {
    temperature: numberOf($('temperature'), 0.7),
    top_p: numberOf($('top-p'), 1),
    max_tokens: Math.max(1, Math.round(numberOf($('max-tokens'), 256))),
  };
}

function activePanes() {
  return sideBySide.checked ? [panes.a, panes.b] : [panes.a];
}

// ---- conversation ---------------------------------------------------------

// Runs `change` and keeps the conversation scrolled to the end if it was
// there: reading back up is not interrupted by new tokens.
function appendScrolled(pane, change) {
  const c = pane.conversation;
  const atEnd = c.scrollHeight - c.scrollTop - c.clientHeight < 40;
  change();
  if (atEnd) c.scrollTop = c.scrollHeight;
}

function addMessage(pane, element) {
  pane.conversation.querySelector('.empty')?.remove();
  appendScrolled(pane, () => pane.conversation.append(element));
}

function emptyConversation(pane) {
  pane.history = [];
  const hint = document.createElement('p');
  hint.className = 'empty';
  hint.textContent = 'Ask something to start a conversation.';
  pane.conversation.replaceChildren(hint);
}

// One turn of one pane: the user message, then the streamed answer.
async function answer(pane, text, params, system, signal) {
  // This turn's history: after a Clear (a new array) it no longer counts.
  const { history } = pane;
  history.push({ role: 'user', content: text });
  addMessage(pane, userMessage(text));
  const model = pane.select.value;
  const view = new AnswerView(model);
  addMessage(pane, view.el);
  const messages = system ? [{ role: 'system', content: system }, ...history] : [...history];
  const result = await streamChat({
    model, messages, sampling: params, signal,
    onUpdate: (r) => appendScrolled(pane, () => view.update(r)),
  });
  appendScrolled(pane, () => view.finish(result));
  // A stopped answer stays in the history as far as it got; a turn that got
  // nothing back leaves it, so that user and assistant still alternate.
  if (result.content) history.push({ role: 'assistant', content: result.content });
  else history.pop();
  if (result.status === 401) showKeyForm('The server refused the API key.');
}

function setBusy(busy) {
  $('send').disabled = busy;
  $('stop').disabled = !busy;
  sideBySide.disabled = busy;
}

async function send() {
  const text = prompt.value.trim();
  if (controller || !text) return;
  const targets = activePanes();
  if (targets.some((p) => !p.select.value)) {
    showBanner('No model to send to: the server lists none (yet).');
    return;
  }
  prompt.value = '';
  fitPrompt();
  controller = new AbortController();
  setBusy(true);
  const params = sampling();
  const system = $('system-prompt').value.trim();
  // Every pane at once: two concurrent streams side by side.
  await Promise.all(targets.map((p) => answer(p, text, params, system, controller.signal)));
  controller = null;
  setBusy(false);
}

function stop() {
  controller?.abort();
}

function clear() {
  stop();
  emptyConversation(panes.a);
  emptyConversation(panes.b);
}

// Side by side starts from pane A's conversation, so both models continue
// the same one.
function setSideBySide(on) {
  if (on) {
    panes.b.history = panes.a.history.map((m) => ({ ...m }));
    panes.b.conversation.replaceChildren(...[...panes.a.conversation.children].map((c) => c.cloneNode(true)));
  }
  panes.b.el.hidden = !on;
  $('model-b-picker').hidden = !on;
  $('panes').classList.toggle('two', on);
}

// ---- models and the API key -----------------------------------------------

function fillModels(ids) {
  for (const pane of Object.values(panes)) {
    const keep = pane.select.value;
    pane.select.replaceChildren(...ids.map((id) => {
      const o = document.createElement('option');
      o.value = id;
      o.textContent = id;
      return o;
    }));
    if (ids.includes(keep)) pane.select.value = keep;
  }
  // B compares against A: another model when there is one.
  if (!ids.includes(panes.b.select.dataset.chosen) && ids.length > 1) panes.b.select.value = ids[1];
  showModelNames();
}

function showModelNames() {
  for (const pane of Object.values(panes)) pane.title.textContent = pane.select.value || 'no model';
}

async function loadModels() {
  const r = await listModels();
  if (r.unauthorized) {
    showKeyForm(hasApiKey() ? 'The server refused this key.' : '');
    return;
  }
  hideKeyForm();
  if (r.error) {
    showBanner(`Could not load the models: ${r.error}`);
    return;
  }
  if (!r.ids.length) showBanner('The server lists no models.');
  else hideBanner();
  fillModels(r.ids);
}

// While the key form is up, the page behind it takes no clicks or focus.
function setPageInert(inert) {
  for (const e of document.querySelectorAll('body > :not(.overlay)')) e.inert = inert;
}

function showKeyForm(error) {
  $('api-key-overlay').hidden = false;
  setPageInert(true);
  const e = $('api-key-error');
  e.textContent = error;
  e.hidden = !error;
  $('api-key').focus();
  $('api-key').select();
}

function hideKeyForm() {
  $('api-key-overlay').hidden = true;
  setPageInert(false);
  $('api-key').value = '';  // the key is kept in api.js, not in the DOM
}

async function submitKey(event) {
  event.preventDefault();  // never a navigation: the CSP forbids form actions
  const key = $('api-key').value.trim();
  if (!key) return;
  setApiKey(key);
  const button = event.submitter || $('api-key-form').querySelector('button');
  button.disabled = true;
  await loadModels();
  button.disabled = false;
}

function showBanner(text) {
  $('banner').textContent = text;
  $('banner').hidden = false;
}

function hideBanner() {
  $('banner').hidden = true;
}

// ---- input ----------------------------------------------------------------

// The prompt grows with its text up to a few lines.
function fitPrompt() {
  prompt.style.height = '';
  if (!prompt.value) return;  // empty: the one row of the markup
  prompt.style.height = 'auto';
  prompt.style.height = `${Math.min(prompt.scrollHeight, 200)}px`;
}

function onPromptKey(event) {
  if (event.key === 'Enter' && !event.shiftKey && !event.isComposing) {
    event.preventDefault();
    send();
  } else if (event.key === 'Escape') {
    stop();
  }
}

// The settings drop-down closes on a click elsewhere, as menus do.
function closeSettingsOutside(event) {
  const settings = $('settings');
  if (settings.open && !settings.contains(event.target)) settings.open = false;
}

// On a phone the live panel starts folded to one line of numbers.
function setupLiveToggle() {
  const toggle = $('live-toggle');
  const set = (open) => {
    toggle.setAttribute('aria-expanded', String(open));
    $('live').classList.toggle('open', open);
  };
  set(!window.matchMedia('(max-width: 600px)').matches);
  toggle.addEventListener('click', () => set(toggle.getAttribute('aria-expanded') !== 'true'));
}

function init() {
  $('composer').addEventListener('submit', (e) => {
    e.preventDefault();
    send();
  });
  prompt.addEventListener('keydown', onPromptKey);
  prompt.addEventListener('input', fitPrompt);
  $('stop').addEventListener('click', stop);
  $('clear').addEventListener('click', clear);
  sideBySide.addEventListener('change', () => setSideBySide(sideBySide.checked));
  panes.a.select.addEventListener('change', showModelNames);
  panes.b.select.addEventListener('change', () => {
    panes.b.select.dataset.chosen = panes.b.select.value;
    showModelNames();
  });
  $('api-key-form').addEventListener('submit', submitKey);
  document.addEventListener('click', closeSettingsOutside);
  setupLiveToggle();
  setSideBySide(sideBySide.checked);  // a reload may keep the box ticked
  loadModels();
  startLive();
}

init();
