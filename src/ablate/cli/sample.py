"""`ablate sample run=DIR [prompt=TEXT] [tokens=N] [temperature=T] [top_k=K] [KEY=VALUE ...]`: what a
trained run writes (a Hydra app over ablate/conf/sample.yaml).

Prints the new text after the prompt (each sample's, with samples=N) and, on stderr, the decode
tokens/s against the memory-bandwidth bound for the model, its dtype and this device; writes the
same as data to RUN/sample.json (out=FILE elsewhere). The work is in run/sample.py.
"""

from __future__ import annotations

import sys
from pathlib import Path

from ablate.cli.common import hydra_main
from ablate.config import parse_sample
from ablate.files import check_writable_dir, refuse_folder
from ablate.oneline import one_line

SUMMARY = "Text from a run's checkpoint, and its decode tokens/s against the memory-bandwidth bound."
EXAMPLE = "ablate sample run=outputs/2025-01-01/12-00-00 prompt='the ' tokens=40 temperature=0.8 top_k=20"


def task(cfg) -> dict:
    from omegaconf import OmegaConf

    from ablate.run import SAMPLE_FILE, sample, write_sample

    with one_line():
        sc = parse_sample(OmegaConf.to_container(cfg, resolve=True))
        out = Path(sc.out) if sc.out else Path(sc.run) / SAMPLE_FILE
        check_writable_dir(out.parent, "out")
        refuse_folder(out, "out")
        made = sample.sample(sc)
    for text in made.texts:
        print(f"{made.prompt}{text}")
    print(f"{made.model} at step {made.step}: {made.speed.line()}", file=sys.stderr)
    print(f"wrote {write_sample(made, out)}", file=sys.stderr)
    return {"out": str(out), "decode_tokens_per_s": made.speed.decode_tokens_per_s}


# Keys whose values are paths or text: a cooldown branch's folder is named KEY=BUDGET
# (branches/tokens=1.04858e+06), which Hydra's override grammar reads as a second `=`.
VERBATIM_KEYS = ("run", "out", "prompt")


def verbatim(argv: list[str]) -> list[str]:
    """Each run=, out= and prompt= value as the user typed it, quoted for Hydra's grammar where it
    holds a character the grammar would read ('=', a bracket, a comma, a quote): `run=.../tokens=1e6`
    works as `run='.../tokens=1e6'` does. A value the user quoted already is left as it is."""
    out = []
    for arg in argv:
        key, eq, value = arg.partition("=")
        if eq and key in VERBATIM_KEYS and value[:1] not in ("'", '"') and any(c in value for c in "=[]{}(),'\" "):
            quote = "'" if "'" not in value else '"'
            value = quote + value.replace(quote, "\\" + quote) + quote
        out.append(f"{key}{eq}{value}" if eq else arg)
    return out


def main(argv: list[str] | None = None) -> None:
    argv = verbatim(sys.argv[1:] if argv is None else list(argv))
    hydra_main(task, config_name="sample", name="sample", summary=SUMMARY, example=EXAMPLE, argv=argv)


if __name__ == "__main__":
    main()
