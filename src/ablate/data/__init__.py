"""Where a run's tokens come from.

sources.py    load_data (synthetic, text, tokens) -> TokenData; get_batch, a pure function of seed and step
synthetic.py  SyntheticLanguage: a Zipf-Markov language whose entropy rate (the loss floor) is exact
cache.py      cached: generated tokens kept on disk, keyed by config and generator code
corpus.py     your files as one byte stream, and where its validation split starts
tokenizer.py  byte-level BPE (Hugging Face tokenizers) trained on it, token files, bytes per token
"""
