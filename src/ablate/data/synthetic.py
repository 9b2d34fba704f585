"""A seeded synthetic language whose entropy rate is known exactly.

A scaling-law fit L(N, D) = E + A/N^a + B/D^b has an irreducible term E. On real text nobody knows it;
on this source it is `SyntheticLanguage.entropy_rate`, so a fitted E can be checked against the truth.

The source, all of it fixed by the language keys of `SyntheticDataConfig` (config/data.py, seed included):
  * a lexicon of W distinct lowercase words, lengths min_len..max_len, ranked 0..W-1 with Zipf weights
    p_i proportional to (i+1)^-zipf_unigram (Zipf-distributed "pieces of knowledge": frequent words are
    learned first, rare ones need more capacity and data);
  * a first-order word Markov chain: word i has K distinct successors succ[i, 0..K-1], and
    P(next = succ[i, r] | word = i) = q_r, q_r proportional to (r+1)^-zipf_successor, the same q for every
    word, so H(next word | word) = H(q) exactly;
  * the token stream is the words' letters with one space after each word; ids 0..25 = 'a'..'z', 26 = ' '.

Entropy rate in nats per token: H = H(q) / E_pi[len(w) + 1], pi the stationary distribution of the chain.
"""

from __future__ import annotations

from functools import cached_property

import numpy as np

from ablate.config import SyntheticDataConfig

__all__ = ["SPACE", "VOCAB_SIZE", "SyntheticLanguage", "cost_seconds"]

SPACE = 26
VOCAB_SIZE = 27
_ALPHABET = "abcdefghijklmnopqrstuvwxyz "
_ID_TO_ASCII = np.frombuffer(_ALPHABET.encode("ascii"), dtype=np.uint8)  # (27,)
_ASCII_TO_ID = np.full(256, 255, dtype=np.uint8)  # (256,), 255 = not in the alphabet
_ASCII_TO_ID[_ID_TO_ASCII] = np.arange(VOCAB_SIZE, dtype=np.uint8)

# Words per batch of successor-rank draws in `generate`. Fixed, so the stream for a seed does not depend on
# how many tokens are asked for: generate(m, s) is a prefix of generate(n, s) for m <= n.
_CHUNK_WORDS = 1 << 16


# CPU seconds per unit of work, measured on this project's 2-core AMD EPYC machines (2026-11) and
# rounded up: the (W, W) exponential race of _draw_successors per element, one power-iteration pass
# per edge (W K; a few hundred passes), and `generate` per token (the walk is a Python loop per word).
SECONDS_PER_RACE_CELL = 1.5e-8
SECONDS_PER_EDGE = 4e-7
SECONDS_PER_TOKEN = 1e-7
# Bytes per token while generating: the int64 gather index and the uint8 stream, plus the words.
BYTES_PER_TOKEN = 11


def cost_seconds(spec: SyntheticDataConfig, tokens: int) -> float:
    """About how many CPU seconds building the language and generating `tokens` takes (see above)."""
    w, k = spec.n_words, spec.successors
    return SECONDS_PER_RACE_CELL * w * w + SECONDS_PER_EDGE * w * k + SECONDS_PER_TOKEN * tokens


def _zipf(n: int, exponent: float) -> np.ndarray:
    """p_r = (r+1)^-s / sum_j (j+1)^-s, r = 0..n-1."""
    w = np.arange(1, n + 1, dtype=np.float64) ** -exponent
    return w / w.sum()


class SyntheticLanguage:
    """The source a `SyntheticDataConfig` defines: lexicon, word chain, exact entropy rate, and a sampler.
    Its train_tokens and val_tokens are how much of it a run draws, not part of the language."""

    def __init__(self, spec: SyntheticDataConfig | None = None) -> None:
        self.spec = spec if spec is not None else SyntheticDataConfig()
        self.spec.validate()
        s = self.spec
        # Construction and generation draw from disjoint seed-sequence streams ([0, seed] vs [1, seed, s']).
        rng = np.random.default_rng([0, s.seed])

        words = self._draw_lexicon(rng)
        self.words: tuple[str, ...] = tuple(words)
        self.word_lengths = np.array([len(w) for w in words], dtype=np.int64)  # (W,)
        # (W,), by rank: the weights successors are drawn with. The stream's word frequencies are pi, which
        # follows them only roughly (each word's inflow is the q-weighted ranks it got in other rows).
        self.unigram_probs = _zipf(s.n_words, s.zipf_unigram)
        self.successor_probs = _zipf(s.successors, s.zipf_successor)  # q, (K,)
        self.successors = self._draw_successors(rng)  # (W, K) word ids, distinct within a row
        self.stationary = self._stationary()  # pi, (W,)

        # Every word followed by its space, concatenated: (sum_w len(w)+1,) uint8, with word w at
        # _lex_flat[_lex_start[w] : _lex_start[w] + len(w) + 1].
        text = np.frombuffer("".join(w + " " for w in words).encode("ascii"), dtype=np.uint8)
        self._lex_flat = _ASCII_TO_ID[text]
        self._lex_start = np.concatenate([[0], np.cumsum(self.word_lengths + 1)[:-1]])  # (W,)
        self._cum_q = np.cumsum(self.successor_probs)
        self._cum_q[-1] = 1.0  # so searchsorted(u in [0, 1), side="right") never passes rank K-1 on round-off
        self._succ_rows: list[list[int]] = self.successors.tolist()

    # ---- construction -------------------------------------------------------------------------------

    def _draw_lexicon(self, rng: np.random.Generator) -> list[str]:
        """W distinct words, lengths uniform on [min_len, max_len] (re-drawn on collision), letters uniform.

        The rank order (which word is frequent) is the order of first appearance, itself random.
        """
        s = self.spec
        # Lengths whose every word is already taken are dropped, so the loop ends even when W is close to
        # the number of possible words.
        free = {n: 26**n for n in range(s.min_len, s.max_len + 1)}
        seen: dict[str, None] = {}
        while len(seen) < s.n_words:
            lengths = np.array(sorted(n for n, c in free.items() if c > 0))
            batch = max(64, 2 * (s.n_words - len(seen)))
            ls = rng.choice(lengths, size=batch)
            letters = rng.integers(0, 26, size=(batch, s.max_len))
            for n, row in zip(ls.tolist(), letters.tolist(), strict=False):
                if free[n] == 0:
                    continue
                w = "".join(_ALPHABET[c] for c in row[:n])
                if w not in seen:
                    seen[w] = None
                    free[n] -= 1
                    if len(seen) == s.n_words:
                        break
        return list(seen)

    def _draw_successors(self, rng: np.random.Generator) -> np.ndarray:
        """(W, K) successor table: row i is K distinct words drawn without replacement with probability
        proportional to the unigram weights p, in draw order (rank 0 = first drawn).

        Exponential race: with E_j iid Exp(1), the K smallest clocks E_j / p_j, in increasing order, have the
        law of K successive weighted draws without replacement, in draw order (equivalent to Gumbel-top-k;
        float32 exponentials are several times cheaper to draw than Gumbels, and the (W, W) draw dominates
        construction time).

        Irreducibility: a random cyclic order c over all W words is threaded through the table: if c(i) is
        not among row i's draws, it replaces the last rank (q_{K-1}, the smallest probability). The chain
        then contains a Hamiltonian cycle, so it has one recurrent class holding every word, pi is unique
        and pi_i > 0 for all i (without this, rare words that no row draws would be transient and the
        stationary lexicon smaller than W).
        """
        s = self.spec
        W, K = s.n_words, s.successors
        inv_p = (1.0 / self.unigram_probs).astype(np.float32)
        succ = np.empty((W, K), dtype=np.int64)
        rows = max(1, (1 << 22) // W)  # bounds the (rows, W) clock block to ~16 MB
        for a in range(0, W, rows):
            b = min(W, a + rows)
            clocks = rng.standard_exponential(size=(b - a, W), dtype=np.float32) * inv_p[None, :]
            top = np.argpartition(clocks, K - 1, axis=1)[:, :K]
            order = np.argsort(np.take_along_axis(clocks, top, axis=1), axis=1, kind="stable")
            succ[a:b] = np.take_along_axis(top, order, axis=1)

        cycle = rng.permutation(W)
        nxt = np.empty(W, dtype=np.int64)
        nxt[cycle] = np.roll(cycle, -1)
        missing = ~(succ == nxt[:, None]).any(axis=1)
        succ[missing, K - 1] = nxt[missing]
        return succ

    def _stationary(self, tol: float = 1e-14, max_iter: int = 100_000) -> np.ndarray:
        """pi = pi P by lazy power iteration, pi <- (pi + pi P) / 2.

        (pi P)_j = sum_{i, r: succ[i, r] = j} pi_i q_r, one bincount over the W*K edges. The lazy chain
        (I + P)/2 has the same stationary distribution and is aperiodic even if P is periodic, so the
        iteration converges for any irreducible P.
        """
        W = self.spec.n_words
        flat = self.successors.ravel()
        pi = np.full(W, 1.0 / W)
        for _ in range(max_iter):
            flow = (pi[:, None] * self.successor_probs[None, :]).ravel()  # (W*K,) pi_i q_r per edge
            moved = np.bincount(flat, weights=flow, minlength=W)
            new = 0.5 * (pi + moved)
            new /= new.sum()
            if np.abs(new - pi).sum() < tol:
                return new
            pi = new
        raise RuntimeError("power iteration for the stationary distribution did not converge")

    # ---- exact quantities ---------------------------------------------------------------------------

    @property
    def vocab_size(self) -> int:
        return VOCAB_SIZE

    @cached_property
    def successor_entropy(self) -> float:
        """H(q) = -sum_r q_r log q_r = H(next word | word), in nats (rows hold distinct words)."""
        q = self.successor_probs
        return float(-(q * np.log(q)).sum())

    @cached_property
    def mean_word_length(self) -> float:
        """E_pi[len(w)], letters per word under the stationary distribution; tokens per word is this + 1."""
        return float(self.stationary @ self.word_lengths)

    @cached_property
    def entropy_rate(self) -> float:
        """Exact entropy rate of the token stream, nats per token: H(q) / E_pi[len(w) + 1].

        Why the word-level entropy carries over to tokens: the space is in no word, so a token string splits
        uniquely at its spaces into letter strings, and the lexicon's words are distinct, so each letter
        string names one word. The map word sequence -> token stream is therefore injective, and
        H(tokens of n words) = H(n words) = H(w_1) + (n-1) H(q). Dividing by the token count,
        n E_pi[len + 1] (ergodic theorem), gives the rate. Equivalently: the stream is a function of the
        Markov chain on (word, position) states, in which only the space position is random (entropy
        H(q)) and has stationary mass 1 / E_pi[len + 1]; the past tokens pin down the current state once a
        space has been seen, so the function loses no entropy rate.
        """
        return self.successor_entropy / (self.mean_word_length + 1.0)

    # ---- sampling -----------------------------------------------------------------------------------

    def generate(self, n_tokens: int, seed: int = 0) -> np.ndarray:
        """(n_tokens,) uint8 token ids, a stationary sample of the source; deterministic for (spec, seed).

        Stationary in token time from token 0: the chain on (word w, position j in 0..len(w)) has
        stationary law pi_w / E_pi[len + 1] for every j, so the first word is drawn with probability
        proportional to pi_w (len(w) + 1) and the stream starts at a uniform position inside it.

        Speed: because every row shares q, the successor ranks r_t are iid ~ q and are drawn in one
        searchsorted per chunk; only the table walk w_{t+1} = succ[w_t, r_t] is a scalar loop (one list
        index per word, ~7 tokens). Letters come from one gather into the concatenated lexicon.
        """
        if n_tokens < 0:
            raise ValueError("n_tokens must be >= 0")
        if seed < 0:
            raise ValueError("seed must be >= 0")
        rng = np.random.default_rng([1, self.spec.seed, seed])
        lens1 = self.word_lengths + 1  # (W,) tokens per word, space included

        biased = self.stationary * lens1
        cum = np.cumsum(biased / biased.sum())
        w0 = min(int(np.searchsorted(cum, rng.random(), side="right")), self.spec.n_words - 1)
        offset = int(rng.integers(0, lens1[w0]))

        need = n_tokens + offset
        chunks: list[np.ndarray] = [np.array([w0], dtype=np.int64)]
        have = int(lens1[w0])
        w = w0
        rows = self._succ_rows
        while have < need:
            ranks = np.searchsorted(self._cum_q, rng.random(_CHUNK_WORDS), side="right").tolist()
            seq = [0] * _CHUNK_WORDS
            for t, r in enumerate(ranks):
                w = rows[w][r]
                seq[t] = w
            chunk = np.array(seq, dtype=np.int64)
            chunks.append(chunk)
            have += int(lens1[chunk].sum())
        seqw = np.concatenate(chunks)

        # Trim to the words that reach `need` tokens, then gather: token k of the stream is
        # _lex_flat[_lex_start[w] + (k - start of w in the stream)].
        ends = np.cumsum(lens1[seqw])
        seqw = seqw[: int(np.searchsorted(ends, need, side="left")) + 1]
        L = lens1[seqw]
        starts = np.cumsum(L) - L  # (n_w,) stream position of each word's first token
        idx = np.repeat(self._lex_start[seqw] - starts, L) + np.arange(int(L.sum()))
        return self._lex_flat[idx[offset:need]]

    @staticmethod
    def decode(ids: np.ndarray | list[int]) -> str:
        """Token ids -> text ('a'..'z', ' ')."""
        return _ID_TO_ASCII[np.asarray(ids, dtype=np.int64)].tobytes().decode("ascii")

    @staticmethod
    def encode(text: str) -> list[int]:
        """Text of 'a'..'z' and ' ' -> token ids; ValueError naming the characters outside them."""
        outside = sorted(set(text) - set(_ALPHABET))
        if outside:
            raise ValueError(
                f"{''.join(outside)!r} is outside the synthetic language's alphabet (valid: a-z and space)"
            )
        return _ASCII_TO_ID[np.frombuffer(text.encode("ascii"), dtype=np.uint8)].tolist()

    def __repr__(self) -> str:
        return f"SyntheticLanguage({self.spec!r}, entropy_rate={self.entropy_rate:.4f} nats/token)"
