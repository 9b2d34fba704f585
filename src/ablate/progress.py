"""Progress lines for long work: a bar per run (step, loss, tokens/s) on stderr."""

from __future__ import annotations

import sys


class RunProgress:
    def __init__(self, total: int, start: int, enabled: bool, label: str):
        self.bar = None
        if enabled:
            from tqdm import tqdm

            self.bar = tqdm(
                total=total, initial=start, desc=label, unit="step", file=sys.stderr,
                dynamic_ncols=True, leave=False, mininterval=0.5,
            )
        self.last = start

    def update(self, step: int, loss: float, tokens_per_s: float) -> None:
        if self.bar is None:
            return
        self.bar.update(step - self.last)
        self.last = step
        self.bar.set_postfix(loss=f"{loss:.3f}", tok_s=f"{tokens_per_s:,.0f}", refresh=False)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
            self.bar = None
