"""LLM.embed (vLLM's offline embeddings): vectors equal the numpy reference's pooling
(tests/reference/forward.py --pool) of the same token ids, PoolingParams, the pooler
configuration as an engine argument, and the refusal on a model not loaded for it."""
import json
import math
import os
import subprocess
import sys

import pytest

from halo import LLM, EmbeddingRequestOutput, PoolingParams


def reference(repo_root, model_dir, ids, pool, normalize=True):
    args = [sys.executable, os.path.join(repo_root, "tests", "reference", "forward.py"), model_dir,
            "--prompt-ids", ",".join(map(str, ids)), "--pool", pool]
    if not normalize:
        args.append("--no-normalize")
    out = subprocess.run(args, capture_output=True, text=True, timeout=120, check=True).stdout
    return json.loads(out)["embedding"]


def assert_close(got, ref):
    assert len(got) == len(ref)
    dot = sum(a * b for a, b in zip(got, ref))
    cosine = dot / math.sqrt(sum(a * a for a in got) * sum(b * b for b in ref))
    assert cosine > 0.9999, cosine
    peak = max(abs(b) for b in ref)
    assert max(abs(a - b) for a, b in zip(got, ref)) < 0.01 * peak


@pytest.fixture(scope="module")
def embedder(model_dir):
    return LLM(model_dir, device="cpu", task="embed", max_model_len=512)


def test_embed_matches_the_numpy_reference(embedder, repo_root, model_dir):
    prompts = ["apt install nginx", {"prompt_token_ids": [1, 40, 41, 42]}]
    outs = embedder.embed(prompts, use_tqdm=False)
    assert len(outs) == 2 and all(isinstance(o, EmbeddingRequestOutput) for o in outs)
    assert outs[1].prompt_token_ids == [1, 40, 41, 42]
    for o in outs:
        assert o.outputs.hidden_size == 256
        assert_close(o.outputs.embedding, reference(repo_root, model_dir, o.prompt_token_ids, "LAST"))


def test_pooling_params_dimensions_and_normalize(embedder):
    full = embedder.embed("dpkg -l", PoolingParams(normalize=False), use_tqdm=False)[0].outputs.embedding
    short = embedder.embed("dpkg -l", PoolingParams(dimensions=8), use_tqdm=False)[0].outputs.embedding
    assert len(short) == 8
    norm = math.sqrt(sum(x * x for x in full[:8]))
    assert all(abs(a - b / norm) < 1e-6 for a, b in zip(short, full[:8]))


def test_pooler_config_engine_argument(repo_root, model_dir):
    llm = LLM(model_dir, device="cpu", task="embed", override_pooler_config={"pooling_type": "MEAN"})
    out = llm.embed({"prompt_token_ids": [1, 7, 8, 9, 10]}, use_tqdm=False)[0]
    assert_close(out.outputs.embedding, reference(repo_root, model_dir, [1, 7, 8, 9, 10], "MEAN"))


def test_embed_refused_without_task_embed(llm):
    with pytest.raises(ValueError, match='task="embed"'):
        llm.embed("x", use_tqdm=False)


def test_bad_pooler_config_is_named(model_dir):
    with pytest.raises(ValueError, match="MAX"):
        LLM(model_dir, device="cpu", task="embed", override_pooler_config={"pooling_type": "MAX"})
