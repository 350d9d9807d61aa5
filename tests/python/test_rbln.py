"""The AsyncLLMEngine example on the (simulated) rbln device with a compiled model, as
vllm-rbln's users write it."""
import asyncio

from halo import AsyncEngineArgs, AsyncLLMEngine, SamplingParams


def test_async_engine_on_rbln(model_dir, compiled_rbln):
    engine_args = AsyncEngineArgs(
        model=model_dir,
        device="rbln",
        compiled_model_dir=compiled_rbln,
        max_num_seqs=4,
        max_model_len=256,
        block_size=256,
    )
    engine = AsyncLLMEngine.from_engine_args(engine_args)

    async def run(prompt, request_id):
        tokenizer = await engine.get_tokenizer()
        sampling_params = SamplingParams(temperature=0.0, max_tokens=32,
                                         stop_token_ids=[tokenizer.eos_token_id])
        final = None
        async for output in engine.generate(prompt, sampling_params, request_id):
            final = output
        return final

    async def main():
        return await asyncio.gather(*(run(p, f"rbln-{i}") for i, p in enumerate(
            ["The capital of France is", "Hello, my name is", "What is curl?"])))

    try:
        finals = asyncio.run(main())
    finally:
        engine.shutdown_background_loop()
    assert "rbln" in engine.engine.device
    for final in finals:
        print(final.prompt, "->", repr(final.outputs[0].text))
        assert final is not None and final.finished
        c = final.outputs[0]
        assert c.token_ids and len(c.token_ids) <= 32
        assert c.finish_reason in {"stop", "length"}
