"""AsyncEngine: the engine driven from a background thread, with the real model in-process."""

from __future__ import annotations

import asyncio

import pytest

from local_engine.async_engine import AsyncEngine, EngineDeadError, EngineStoppedError
from local_engine.errors import RequestTooLongError
from local_engine.sampling import SamplingParams

COUNT = "Counting: " + ", ".join(str(i) for i in range(1, 21)) + ","


def run(coro):
    return asyncio.run(coro)


async def _free(ae):
    return await ae.call(lambda e: e.kv_cache_manager.num_free_blocks)


def test_concurrent_requests_match_the_engine_alone(engine):
    prompts = [engine.tokenizer.encode(f"Question {i}: name a colour.") for i in range(3)]
    params = SamplingParams(temperature=0.0, max_tokens=5)

    async def main():
        ae = AsyncEngine(engine).start()
        try:

            async def one(i):
                last = None
                async for out in ae.generate(f"r{i}", prompts[i], params):
                    last = out
                return last

            return await asyncio.gather(*(one(i) for i in range(3)))
        finally:
            await ae.shutdown()

    outs = run(main())
    assert all(o.finished for o in outs)
    # the same prompts through the engine directly, one at a time, give the same tokens
    for i, o in enumerate(outs):
        engine.add_request(f"ref{i}", prompts[i], params)
        ref = None
        while engine.has_unfinished_requests():
            for r in engine.step():
                if r.finished:
                    ref = r
        assert o.token_ids == ref.token_ids


def test_closing_the_stream_aborts_and_frees_blocks(engine):
    ids = engine.tokenizer.encode(COUNT)

    async def main():
        ae = AsyncEngine(engine).start()
        try:
            idle = await _free(ae)
            gen = ae.generate("long", ids, SamplingParams(temperature=0.0, max_tokens=300))
            n = 0
            async for _out in gen:
                n += 1
                if n == 3:
                    busy = await _free(ae)
                    break
            await gen.aclose()
            for _ in range(100):
                if await _free(ae) == idle and not await ae.call(
                    lambda e: e.has_unfinished_requests()
                ):
                    return idle, busy, True
                await asyncio.sleep(0.05)
            return idle, busy, False
        finally:
            await ae.shutdown()

    idle, busy, freed = run(main())
    assert busy < idle and freed


def test_refused_request_raises_at_the_first_iteration(engine):
    async def main():
        ae = AsyncEngine(engine).start()
        try:
            with pytest.raises(RequestTooLongError) as e:
                async for _ in ae.generate(
                    "big", [100] * (engine.max_model_len + 5), SamplingParams(max_tokens=1)
                ):
                    pass
            return str(e.value)
        finally:
            await ae.shutdown()

    msg = run(main())
    assert str(engine.max_model_len) in msg and str(engine.max_model_len + 5) in msg


def test_shutdown_drains_then_refuses(engine):
    ids = engine.tokenizer.encode(COUNT)

    async def main():
        ae = AsyncEngine(engine).start()
        results = []

        async def consume():
            async for out in ae.generate(
                "drain", ids, SamplingParams(temperature=0.0, max_tokens=12)
            ):
                results.append(out)

        task = asyncio.ensure_future(consume())
        while not results:
            await asyncio.sleep(0.01)
        await ae.shutdown(drain_timeout=120)
        await task
        with pytest.raises(EngineStoppedError):
            async for _ in ae.generate("late", ids, SamplingParams(max_tokens=1)):
                pass
        return results[-1]

    last = run(main())
    assert last.finished and len(last.token_ids) == 12


def test_engine_failure_reaches_waiting_requests(engine, monkeypatch):
    ids = engine.tokenizer.encode("Hello")

    def broken_step():
        raise RuntimeError("simulated kernel failure")

    async def main():
        ae = AsyncEngine(engine)
        monkeypatch.setattr(engine, "step", broken_step)
        ae.start()
        with pytest.raises(EngineDeadError, match="simulated kernel failure"):
            async for _ in ae.generate("doomed", ids, SamplingParams(max_tokens=2)):
                pass
        assert not ae.is_running
        with pytest.raises(EngineDeadError):
            async for _ in ae.generate("after", ids, SamplingParams(max_tokens=2)):
                pass

    try:
        run(main())
    finally:
        monkeypatch.undo()
        engine.abort_request("doomed")  # leave the shared engine idle
    assert not engine.has_unfinished_requests()
