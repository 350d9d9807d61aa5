// One streamed chat answer: POST /v1/chat/completions with stream: true and
// read the server-sent events off the response body as they arrive.
import { apiFetch, errorMessage } from './api.js';

// Yields the data of each server-sent event of `body` (a ReadableStream).
// Events are "data: ..." lines ended by a blank line; other fields carry
// nothing for chat and are skipped.
export async function* sseData(body) {
  const reader = body.getReader();
  const decoder = new TextDecoder();
  let buffer = '';
  let data = [];
  try {
    for (;;) {
      const { value, done } = await reader.read();
      buffer += done ? decoder.decode() : decoder.decode(value, { stream: true });
      let nl;
      while ((nl = buffer.indexOf('\n')) >= 0) {
        let line = buffer.slice(0, nl);
        buffer = buffer.slice(nl + 1);
        if (line.endsWith('\r')) line = line.slice(0, -1);
        if (line === '') {
          if (data.length) yield data.join('\n');
          data = [];
        } else if (line.startsWith('data:')) {
          data.push(line.slice(line.startsWith('data: ') ? 6 : 5));
        }
      }
      if (done) break;
    }
    if (data.length) yield data.join('\n');
  } finally {
    // Leaving early (after [DONE] or an error event) frees the connection;
    // after an abort the cancel is refused, which is fine.
    reader.cancel().catch(() => {});
  }
}

function requestBody(model, messages, sampling) {
  return JSON.stringify({
    model,
    messages,
    stream: true,
    stream_options: { include_usage: true },
    temperature: sampling.temperature,
    top_p: sampling.top_p,
    max_tokens: sampling.max_tokens,
  });
}

function newResult() {
  return {
    content: '',
    reasoning: '',
    chunks: 0,          // deltas with text: the token count when usage is missing
    usage: null,
    finishReason: null,
    error: null,
    status: 0,
    stopped: false,
    timing: { start: performance.now(), first: null, last: null, end: null },
  };
}

// Folds one parsed chunk into `result`; returns false once the stream is over.
function applyChunk(result, chunk) {
  if (chunk.error) {
    result.error = String(chunk.error.message || JSON.stringify(chunk.error));
    return false;
  }
  if (chunk.usage) result.usage = chunk.usage;
  const choice = chunk.choices && chunk.choices[0];
  if (!choice) return true;
  const delta = choice.delta || {};
  const text = typeof delta.content === 'string' ? delta.content : '';
  const thought = typeof delta.reasoning_content === 'string' ? delta.reasoning_content : '';
  if (text || thought) {
    const now = performance.now();
    if (result.timing.first === null) result.timing.first = now;
    result.timing.last = now;
    result.chunks += 1;
    result.content += text;
    result.reasoning += thought;
  }
  if (choice.finish_reason) result.finishReason = choice.finish_reason;
  return true;
}

// Streams one answer; calls onUpdate(result) after each chunk with text.
// Always resolves (never throws): errors and a stop end up in the result.
export async function streamChat({ model, messages, sampling, signal, onUpdate }) {
  const result = newResult();
  try {
    const response = await apiFetch('/v1/chat/completions', {
      method: 'POST',
      headers: { 'Content-Type': 'application/json' },
      body: requestBody(model, messages, sampling),
      signal,
    });
    result.status = response.status;
    if (!response.ok) {
      result.error = await errorMessage(response);
    } else {
      for await (const data of sseData(response.body)) {
        // Events that arrived together with the stop are dropped too.
        if (signal && signal.aborted) {
          result.stopped = true;
          break;
        }
        // [DONE] is the last event: read on to the end of the body, which
        // keeps the connection open for the next request.
        if (data === '[DONE]') continue;
        let chunk;
        try {
          chunk = JSON.parse(data);
        } catch {
          continue;  // not JSON: nothing we can show
        }
        const before = result.chunks;
        if (!applyChunk(result, chunk)) break;
        if (result.chunks !== before) onUpdate(result);
      }
    }
  } catch (e) {
    // The stop button aborts the fetch: an expected end, not an error.
    if (e && e.name === 'AbortError') result.stopped = true;
    else result.error = `the connection failed: ${e && e.message ? e.message : e}`;
  }
  result.timing.end = performance.now();
  return result;
}

// TTFT (ms), tokens, decode tokens/s and total time (ms) of a result, so far
// or final. The server's usage count wins over counting chunks.
export function answerStats(result) {
  const { start, first, last, end } = result.timing;
  const tokens = result.usage ? result.usage.completion_tokens : result.chunks;
  const decodeMs = first !== null && last > first ? last - first : 0;
  return {
    ttft: first === null ? null : first - start,
    tokens,
    // The first token is the prefill's: decode speed counts the ones after it.
    tps: tokens > 1 && decodeMs > 0 ? ((tokens - 1) * 1000) / decodeMs : null,
    total: (end ?? performance.now()) - start,
  };
}
