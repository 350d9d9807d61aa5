#!/usr/bin/env python3
"""KV cache events end to end: `halo serve --kv-events-config` against an
independent subscriber (pyzmq + msgpack + cbor2 from Debian), as llm-d's
router would read them.

Checks that could fail:
- the wire format: topic, 8-byte big-endian sequence numbers counting from 0,
  msgpack [ts, events, dp_rank] with array-tagged events;
- every BlockStored hash is the llm-d chain recomputed here from the event's
  token ids (FNV-64a over canonical CBOR, rooted at the seed and model name),
  and the token ids are the prompt's;
- a request sharing a prefix stores only its new blocks, chained to the
  shared ones;
- BlockRemoved only names blocks stored and not yet removed, and the index
  built from the events predicts the engine's own prefix-cache hits
  (vllm:prefix_cache_hits);
- replay from the ROUTER socket returns the very payloads published, then -1.

Needs HALO_BIN and HALO_PLUGIN_PATH, and Debian's python3-zmq, python3-msgpack
and python3-cbor2 (a failure without them, naming them).
"""
import json
import os
import re
import socket
import subprocess
import sys
import threading
import time
import unittest
import urllib.request

try:
    import cbor2
    import msgpack
    import zmq
except ImportError as e:  # pragma: no cover
    # A failure, not a skip: scripts/install-deps.sh --test installs them.
    print(f"{e}: install python3-zmq python3-msgpack python3-cbor2 (scripts/install-deps.sh --test)")
    sys.exit(1)

HALO = os.environ.get("HALO_BIN", "build/bin/halo")
MODEL = "pkgchat-5m"
SEED = "1234"
BLOCK = 16
SLOW = float(os.environ.get("HALO_TEST_SLOWDOWN", "1"))


def fnv64a(data: bytes) -> int:
    h = 14695981039346656037
    for b in data:
        h = ((h ^ b) * 1099511628211) & 0xFFFFFFFFFFFFFFFF
    return h


def root_hash(seed: str, model: str) -> int:
    return fnv64a(cbor2.dumps([fnv64a(seed.encode()), None, model], canonical=True))


def chain(parent: int, tokens):
    hashes = []
    for i in range(0, len(tokens) - len(tokens) % BLOCK, BLOCK):
        parent = fnv64a(cbor2.dumps([parent, tokens[i:i + BLOCK], None], canonical=True))
        hashes.append(parent)
    return hashes


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class KvEventsTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.pub_port, cls.replay_port = free_port(), free_port()
        config = {
            "enable_kv_cache_events": True,
            "publisher": "zmq",
            "endpoint": f"tcp://*:{cls.pub_port}",
            "replay_endpoint": f"tcp://*:{cls.replay_port}",
            "topic": "kv@test-pod@{model}",
        }
        env = dict(os.environ, PYTHONHASHSEED=SEED)
        # 40 blocks of KV: small enough that a few prompts evict.
        cls.proc = subprocess.Popen(
            [HALO, "serve", "--port", "0", "--threads", "1", "--block-size", str(BLOCK), "--max-kv-tokens",
             str(40 * BLOCK), "--max-model-len", "256", "--kv-events-config", json.dumps(config)],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
        cls.log = []
        deadline = time.time() + 60 * SLOW
        for line in cls.proc.stdout:
            cls.log.append(line)
            m = re.search(r"ready at (http://[^ ]+)/v1", line)
            if m:
                cls.url = m.group(1)
                break
            if time.time() > deadline:
                break
        else:
            raise AssertionError("halo serve exited:\n" + "".join(cls.log))
        # Keep reading its log, so a full pipe never stalls the server.
        cls.reader = threading.Thread(target=lambda: cls.log.extend(cls.proc.stdout), daemon=True)
        cls.reader.start()
        cls.ctx = zmq.Context()
        cls.sub = cls.ctx.socket(zmq.SUB)
        cls.sub.setsockopt(zmq.SUBSCRIBE, b"kv@")
        cls.sub.connect(f"tcp://127.0.0.1:{cls.pub_port}")
        time.sleep(0.5)  # ZeroMQ's slow joiner: the subscription must reach the publisher
        cls.seen = {}  # seq -> raw payload
        cls.live = set()  # block hashes the index believes the replica holds

    @classmethod
    def tearDownClass(cls):
        cls.sub.close(0)
        cls.ctx.term()
        cls.proc.terminate()
        code = cls.proc.wait(60 * SLOW)
        cls.reader.join(10)
        # 0 after a clean drain; under the sanitizers a leak or error changes it.
        assert code == 0, f"halo serve exited {code}:\n" + "".join(cls.log[-40:])

    # --- helpers ---
    def complete(self, tokens):
        body = json.dumps({"model": MODEL, "prompt": tokens, "max_tokens": 1, "temperature": 0}).encode()
        req = urllib.request.Request(self.url + "/v1/completions", body, {"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=60 * SLOW) as r:
            self.assertEqual(r.status, 200)

    def prefix_hits(self) -> float:
        with urllib.request.urlopen(self.url + "/metrics", timeout=10) as r:
            text = r.read().decode()
        m = re.search(r'^vllm:prefix_cache_hits(?:_total)?\{[^}]*\} ([0-9.e+]+)$', text, re.M)
        self.assertIsNotNone(m, "no vllm:prefix_cache_hits in /metrics")
        return float(m.group(1))

    def drain(self, want_stored=0, timeout=5.0):
        """Receives batches until `want_stored` BlockStored events came and
        the socket is quiet; applies them to the index; returns the events."""
        events, stored = [], 0
        deadline = time.time() + timeout * SLOW
        while time.time() < deadline:
            if not self.sub.poll(200 if stored >= want_stored else 1000):
                if stored >= want_stored:
                    break
                continue
            topic, seq, payload = self.sub.recv_multipart()
            self.assertEqual(topic, f"kv@test-pod@{MODEL}".encode())
            self.assertEqual(len(seq), 8)
            n = int.from_bytes(seq, "big")
            if self.seen:
                self.assertEqual(n, max(self.seen) + 1, "sequence numbers must be consecutive")
            self.seen[n] = payload
            batch = msgpack.unpackb(payload)
            self.assertEqual(len(batch), 3)
            self.assertIsInstance(batch[0], float)
            self.assertEqual(batch[2], 0)  # data_parallel_rank
            for ev in batch[1]:
                events.append(ev)
                self.apply(ev)
                stored += ev[0] == "BlockStored"
        return events

    def apply(self, ev):
        kind = ev[0]
        if kind == "BlockStored":
            hashes, parent, tokens, block_size = ev[1], ev[2], ev[3], ev[4]
            self.assertEqual(len(ev), 8, ev)
            self.assertEqual(block_size, BLOCK)
            self.assertEqual(len(tokens), BLOCK * len(hashes))
            start = root_hash(SEED, MODEL) if parent is None else parent
            self.assertEqual(hashes, chain(start, tokens), "block hashes differ from the router's chain")
            if parent is not None:
                self.assertIn(parent, self.live, "a stored block's parent must be held")
            for h in hashes:
                self.assertNotIn(h, self.live, "a block stored twice")
                self.live.add(h)
        elif kind == "BlockRemoved":
            for h in ev[1]:
                self.assertIn(h, self.live, "removed a block never stored (or removed twice)")
                self.live.discard(h)
        elif kind == "AllBlocksCleared":
            self.live.clear()
        else:
            self.fail(f"unknown event {kind}")

    def predicted_hit(self, tokens) -> int:
        hit = 0
        for h in chain(root_hash(SEED, MODEL), tokens[:len(tokens) - 1]):
            if h not in self.live:
                break
            hit += BLOCK
        return hit

    # --- the test: one story, in order ---
    def test_events_follow_the_prefix_cache(self):
        a = [100 + i for i in range(5 * BLOCK + 3)]  # 5 full blocks and 3 tokens
        self.complete(a)
        events = self.drain(want_stored=1)
        stored = [e for e in events if e[0] == "BlockStored"]
        self.assertEqual(len(stored), 1, events)
        self.assertIsNone(stored[0][2], "a prompt's first block has no parent")
        self.assertEqual(stored[0][3], a[:5 * BLOCK], "token ids are the prompt's full blocks")
        a_hashes = stored[0][1]

        # B shares A's first 3 blocks: only its own 2 blocks are stored,
        # chained to A's third, and the engine reports 3 blocks of hits.
        b = a[:3 * BLOCK] + [900 + i for i in range(2 * BLOCK + 1)]
        self.assertEqual(self.predicted_hit(b), 3 * BLOCK)
        before = self.prefix_hits()
        self.complete(b)
        stored = [e for e in self.drain(want_stored=1) if e[0] == "BlockStored"]
        self.assertEqual(len(stored), 1)
        self.assertEqual(stored[0][2], a_hashes[2])
        self.assertEqual(len(stored[0][1]), 2)
        self.assertEqual(self.prefix_hits() - before, 3 * BLOCK)

        # Distinct prompts overflow the 40-block cache until part of A is
        # evicted (its tail first: a finished sequence frees its last block
        # first) while its first block is still held.
        removed = []
        for k in range(20):
            self.complete([2000 + 50 * k + i for i in range(4 * BLOCK + 1)])
            removed += [h for e in self.drain(want_stored=1) if e[0] == "BlockRemoved" for h in e[1]]
            if set(a_hashes) & set(removed) and a_hashes[0] in self.live:
                break
        self.assertTrue(set(a_hashes) & set(removed), "the cache never evicted A's blocks")
        # The index built from the events predicts the engine's hits on A.
        predicted = self.predicted_hit(a)
        self.assertTrue(0 < predicted < 5 * BLOCK, predicted)
        before = self.prefix_hits()
        self.complete(a)
        self.drain(want_stored=1)
        self.assertEqual(self.prefix_hits() - before, predicted)

        # Replay from the first batch: the same bytes as published, then -1.
        dealer = self.ctx.socket(zmq.DEALER)
        dealer.connect(f"tcp://127.0.0.1:{self.replay_port}")
        dealer.send_multipart([b"", (0).to_bytes(8, "big")])
        replayed = {}
        while dealer.poll(10000 * SLOW):
            frames = dealer.recv_multipart()
            self.assertEqual(frames[0], b"")
            seq = int.from_bytes(frames[1], "big", signed=True)
            if seq == -1:
                self.assertEqual(frames[2], b"")
                break
            replayed[seq] = frames[2]
        else:
            self.fail("no end of replay")
        dealer.close(0)
        self.assertEqual(min(replayed), 0)
        self.assertEqual(msgpack.unpackb(replayed[0])[1], [["AllBlocksCleared"]])
        for seq, payload in self.seen.items():
            self.assertEqual(replayed.get(seq), payload, f"batch {seq} replayed differently")

    def test_check_config_shows_prefix_caching_turned_on(self):
        r = subprocess.run([HALO, "serve", "--check-config", "--kv-events-config", '{"enable_kv_cache_events": true}'],
                           capture_output=True, text=True, timeout=60 * SLOW)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertRegex(r.stdout, r"enable-prefix-caching = true +\(--kv-events-config\)")

    def test_bad_config_is_refused(self):
        for config, says in [('{"enable_kv_cache_events": true, "endpint": "x"}', "unknown field 'endpint'"),
                             ('{"buffer_steps": -1}', "'buffer_steps' must be a positive integer"),
                             ('not json', "not JSON")]:
            r = subprocess.run([HALO, "serve", "--port", "0", "--kv-events-config", config],
                               capture_output=True, text=True, timeout=60 * SLOW)
            self.assertNotEqual(r.returncode, 0)
            self.assertIn(says, r.stderr + r.stdout)
        # A taken endpoint: named, before any model loads.
        r = subprocess.run([HALO, "serve", "--port", "0", "--kv-events-config",
                            json.dumps({"enable_kv_cache_events": True, "endpoint": f"tcp://*:{self.pub_port}"})],
                           capture_output=True, text=True, timeout=60 * SLOW)
        self.assertNotEqual(r.returncode, 0)
        self.assertIn(f"binding endpoint 'tcp://*:{self.pub_port}'", r.stderr + r.stdout)


if __name__ == "__main__":
    unittest.main(verbosity=2)
