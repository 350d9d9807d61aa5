"""AsyncLLMEngine on cpu: concurrent streams, abort and cancellation."""
import asyncio
import time

import pytest

from halo import AsyncEngineArgs, AsyncLLMEngine, RequestOutput, SamplingParams


@pytest.fixture(scope="module")
def engine(model_dir):
    args = AsyncEngineArgs(model=model_dir, device="cpu", max_num_seqs=8, max_model_len=512)
    eng = AsyncLLMEngine.from_engine_args(args)
    yield eng
    eng.shutdown_background_loop()


async def collect(engine, prompt, params, request_id):
    outs = []
    async for out in engine.generate(prompt, params, request_id):
        outs.append(out)
    return outs


def check_cumulative(outs):
    assert outs, "no output"
    for prev, cur in zip(outs, outs[1:]):
        assert not prev.finished
        for p, c in zip(prev.outputs, cur.outputs):
            assert c.text.startswith(p.text)
            assert c.token_ids[:len(p.token_ids)] == p.token_ids
    assert outs[-1].finished
    assert all(c.finish_reason is not None for c in outs[-1].outputs)


def test_sixteen_concurrent_requests(engine):
    async def main():
        params = SamplingParams(temperature=0.8, top_p=0.95, max_tokens=32, seed=1)
        return await asyncio.gather(*(collect(engine, f"Story number {i}:", params, f"c{i}")
                                      for i in range(16)))

    results = asyncio.run(main())
    assert len(results) == 16
    for i, outs in enumerate(results):
        assert all(isinstance(o, RequestOutput) and o.request_id == f"c{i}" for o in outs)
        check_cumulative(outs)
        last = outs[-1].outputs[0]
        assert 1 <= len(last.token_ids) <= 32
        assert last.finish_reason in {"stop", "length"}
        assert outs[-1].prompt == f"Story number {i}:"
    # streaming: a request of several tokens came in more than one piece
    assert any(len(outs) > 2 for outs in results)


def test_greedy_stream_equals_offline(engine, llm):
    params = SamplingParams(temperature=0, max_tokens=20)
    outs = asyncio.run(collect(engine, {"prompt": "The capital of France is"}, params, "g1"))
    offline = llm.generate("The capital of France is", params)[0]
    assert outs[-1].outputs[0].token_ids == offline.outputs[0].token_ids
    assert outs[-1].outputs[0].text == offline.outputs[0].text
    ids = offline.prompt_token_ids
    by_ids = asyncio.run(collect(engine, {"prompt_token_ids": ids}, params, "g2"))
    assert by_ids[-1].outputs[0].token_ids == offline.outputs[0].token_ids


def test_abort(engine):
    async def main():
        params = SamplingParams(temperature=0.8, ignore_eos=True, max_tokens=400)
        outs = []
        start = None
        async for out in engine.generate("Write forever:", params, "long-1"):
            outs.append(out)
            if len(outs) == 1:
                start = time.monotonic()
                await engine.abort("long-1")
        return outs, time.monotonic() - start

    outs, seconds = asyncio.run(main())
    last = outs[-1].outputs[0]
    assert seconds < 5
    assert len(last.token_ids) < 400
    assert outs[-1].finished and last.finish_reason == "abort"


def test_cancel_aborts_the_request(engine):
    aborted_before = engine.metrics()["request_success"].get("abort", 0)

    async def main():
        params = SamplingParams(temperature=0.8, ignore_eos=True, max_tokens=400)
        first = asyncio.Event()

        async def consume():
            async for _ in engine.generate("Write forever:", params, "long-2"):
                first.set()

        task = asyncio.create_task(consume())
        await asyncio.wait_for(first.wait(), 30)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        # the id is free again and the engine serves the next request
        outs = await collect(engine, "Hello", SamplingParams(temperature=0, max_tokens=4), "long-2")
        return outs

    outs = asyncio.run(main())
    assert outs[-1].finished
    # nothing is left running: wait briefly for the engine to retire the aborted one
    deadline = time.monotonic() + 5
    metrics = engine.metrics()
    while time.monotonic() < deadline:
        metrics = engine.metrics()
        if metrics["num_running"] == 0 and metrics["num_waiting"] == 0:
            break
        time.sleep(0.05)
    print(metrics)
    assert metrics["num_running"] == 0
    assert metrics["num_waiting"] == 0
    # the cancelled request ended as an abort, not by running to its 400 tokens
    assert metrics["request_success"].get("abort", 0) == aborted_before + 1


def test_closing_the_generator_aborts(engine):
    async def main():
        params = SamplingParams(temperature=0.8, ignore_eos=True, max_tokens=400)
        gen = engine.generate("Write forever:", params, "long-3")
        first = await gen.__anext__()
        await gen.aclose()
        return first

    first = asyncio.run(main())
    assert not first.finished
    # the id is free again
    outs = asyncio.run(collect(engine, "Hi", SamplingParams(temperature=0, max_tokens=2), "long-3"))
    assert outs[-1].finished


def test_duplicate_request_id(engine):
    async def main():
        params = SamplingParams(temperature=0.8, ignore_eos=True, max_tokens=100)
        gen = engine.generate("Write:", params, "dup")
        await gen.__anext__()
        try:
            with pytest.raises(ValueError):
                await engine.generate("Again", params, "dup").__anext__()
        finally:
            await gen.aclose()

    asyncio.run(main())


def test_bad_params_raise_value_error(engine):
    async def main():
        await engine.generate("Hi", SamplingParams(temperature=-1), "bad").__anext__()

    with pytest.raises(ValueError, match="temperature"):
        asyncio.run(main())


def test_tokenizer_and_model_config(engine, model_dir):
    async def main():
        return await engine.get_tokenizer(), await engine.get_model_config()

    tok, config = asyncio.run(main())
    assert tok.eos_token_id == 5
    assert config.max_model_len == 512
    assert engine.is_running and not engine.errored
