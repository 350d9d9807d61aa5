"""The progress bar of LLM.generate: tqdm when it is installed, else a plain one-line bar
on stderr."""
import sys
import time
from typing import Any, Optional


class PlainBar:
    """A minimal tqdm look-alike: one line on stderr, redrawn with \\r."""

    def __init__(self, total: int, desc: str = "Processed prompts", file: Any = None,
                 width: int = 30) -> None:
        self.total = total
        self.n = 0
        self.desc = desc
        self.file = file or sys.stderr
        self.width = width
        self.postfix = ""
        self.start = time.perf_counter()
        self._last_draw = 0.0
        self._drawn = None
        self._closed = False
        self._draw(force=True)

    def update(self, k: int = 1) -> None:
        self.n += k
        self._draw(force=self.n >= self.total)

    def set_postfix_str(self, s: str, refresh: bool = True) -> None:
        self.postfix = s

    def _draw(self, force: bool = False) -> None:
        now = time.perf_counter()
        if not force and now - self._last_draw < 0.1:
            return
        if (self.n, self.postfix) == self._drawn:
            return
        self._last_draw = now
        self._drawn = (self.n, self.postfix)
        frac = self.n / self.total if self.total else 1.0
        filled = int(round(frac * self.width))
        elapsed = now - self.start
        line = (f"\r{self.desc}: {frac * 100:3.0f}%|{'#' * filled}{' ' * (self.width - filled)}| "
                f"{self.n}/{self.total} [{elapsed:.1f}s{', ' + self.postfix if self.postfix else ''}]")
        try:
            self.file.write(line)
            self.file.flush()
        except (OSError, ValueError):
            pass

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._draw(force=True)
        try:
            self.file.write("\n")
            self.file.flush()
        except (OSError, ValueError):
            pass


def make_bar(total: int, use_tqdm: Any) -> Any:
    """use_tqdm True: tqdm if importable, else PlainBar; a callable: called like tqdm."""
    kwargs = dict(total=total, desc="Processed prompts", dynamic_ncols=True)
    if callable(use_tqdm):
        return use_tqdm(**kwargs)
    try:
        from tqdm import tqdm  # type: ignore
    except ImportError:
        return PlainBar(total)
    return tqdm(**kwargs)


class Progress:
    """The callback of _C.Engine.generate: progress(done, total, generated_tokens, seconds)."""

    def __init__(self, total: int, use_tqdm: Any) -> None:
        self.bar = make_bar(total, use_tqdm)
        self.done = 0

    def __call__(self, done: int, total: int, generated_tokens: int, seconds: float) -> None:
        if seconds > 0:
            self.bar.set_postfix_str(f"output: {generated_tokens / seconds:.2f} toks/s", refresh=False)
        if done > self.done:
            self.bar.update(done - self.done)
            self.done = done

    def close(self) -> None:
        self.bar.close()


def progress_for(total: int, use_tqdm: Any) -> Optional[Progress]:
    if not use_tqdm or total <= 1:
        return None
    return Progress(total, use_tqdm)
