// The messages of a conversation as DOM elements. Server text goes in with
// textContent only: a model's output is never parsed as HTML.
import { answerStats } from './chat.js';

function el(tag, className, text) {
  const e = document.createElement(tag);
  if (className) e.className = className;
  if (text !== undefined) e.textContent = text;
  return e;
}

export function userMessage(text) {
  const msg = el('div', 'msg user');
  msg.append(el('div', 'text', text));
  return msg;
}

// A stat: its value in [data-stat=NAME] (the raw number in data-value), and
// a label.
function stat(name, label, before) {
  const wrap = el('span', 'stat');
  const value = el('span', 'stat-value', '–');
  value.dataset.stat = name;
  const tag = el('span', 'stat-label', label);
  if (before) wrap.append(tag, ' ', value);
  else wrap.append(value, ' ', tag);
  return wrap;
}

function setStat(root, name, value, text) {
  const e = root.querySelector(`[data-stat="${name}"]`);
  e.textContent = value === null ? '–' : text;
  e.dataset.value = value === null ? '' : String(value);
}

function formatTps(tps) {
  return tps >= 100 ? tps.toFixed(0) : tps.toFixed(1);
}

const FINISH_NOTES = {
  length: 'stopped at the max tokens limit',
  content_filter: 'stopped by the content filter',
};

// An assistant answer being streamed: update() as chunks arrive, finish() once.
export class AnswerView {
  constructor(model) {
    this.el = el('div', 'msg assistant streaming');
    this.el.append(el('div', 'msg-model', model));
    this.reasoning = el('div', 'reasoning');
    this.reasoning.hidden = true;
    this.text = el('div', 'text');
    this.note = el('div', 'note');
    this.note.hidden = true;
    this.stats = el('div', 'stats');
    this.stats.append(
      stat('ttft', 'TTFT', true),
      stat('tokens', 'tokens'),
      stat('tps', 'decode tok/s'),
      stat('time', 'total'),
    );
    this.el.append(this.reasoning, this.text, this.note, this.stats);
    this.shown = { content: 0, reasoning: 0 };
  }

  // Appends only what is new since the last update: cheap per chunk.
  update(result) {
    if (result.reasoning.length > this.shown.reasoning) {
      this.reasoning.hidden = false;
      this.reasoning.append(result.reasoning.slice(this.shown.reasoning));
      this.shown.reasoning = result.reasoning.length;
    }
    if (result.content.length > this.shown.content) {
      this.text.append(result.content.slice(this.shown.content));
      this.shown.content = result.content.length;
    }
    this.showStats(result);
  }

  showStats(result) {
    const s = answerStats(result);
    setStat(this.stats, 'ttft', s.ttft, s.ttft === null ? '' : `${Math.round(s.ttft)} ms`);
    setStat(this.stats, 'tokens', s.tokens, String(s.tokens));
    setStat(this.stats, 'tps', s.tps, s.tps === null ? '' : formatTps(s.tps));
    setStat(this.stats, 'time', s.total, `${(s.total / 1000).toFixed(2)} s`);
  }

  finish(result) {
    this.update(result);
    // One text node again instead of one per chunk.
    this.text.textContent = result.content;
    this.el.classList.remove('streaming');
    let note = FINISH_NOTES[result.finishReason] || '';
    if (result.stopped) {
      this.el.classList.add('stopped');
      note = 'stopped';
    } else if (result.error) {
      this.el.classList.add('error');
      note = result.error;
    } else {
      this.el.classList.add('done');
    }
    if (note) {
      this.note.textContent = note;
      this.note.hidden = false;
    }
    if (!result.content && !result.reasoning) {
      this.text.hidden = true;
      // Nothing was generated: no numbers to show under an error.
      if (result.error) this.stats.hidden = true;
    }
  }
}
