"""Where a run's tokens come from.

sources.py    load_data (synthetic, text, tokens) -> TokenData; get_batch, a pure function of seed and step
batches.py    TrainBatches: the next step's batch drawn and copied (pinned, non-blocking) ahead of its step
synthetic.py  SyntheticLanguage: a Zipf-Markov language whose entropy rate (the loss floor) is exact
cache.py      cached: generated tokens kept on disk, keyed by config and generator code
corpus.py     your files as one byte stream, and where its validation split starts
codec.py      codec_for: a run's tokens as text and text as its tokens (the alphabet, bytes, BPE)
tokenizer.py  byte-level BPE (Hugging Face tokenizers) trained on it, token files, bytes per token
"""

from ablate.api import lazy_api

__all__, __getattr__, __dir__ = lazy_api(
    __name__,
    {
        "sources": ("TokenData", "check_fits", "get_batch", "get_val_batch", "load_data"),
        "batches": ("TrainBatches",),
        "corpus": ("read_corpus",),
        "codec": ("Codec", "bpe", "codec_for"),
    },
    modules=("tokenizer",),
)
