"""An interpolated Kneser-Ney n-gram language model over token ids: the first rung of the lineage, scored on the same
tokens and with the same bits-per-byte computation as the neural models (`hf_seq.evaluation.lm_metrics`).

Interpolated Kneser-Ney (Kneser and Ney 1995; the interpolated form of Chen and Goodman 1999), for a history h of
k-1 tokens and its suffix h' (h without its oldest token):

    P_k(w | h) = max(c_k(h w) - D_k, 0) / c_k(h .)  +  D_k N_k(h .) / c_k(h .) * P_{k-1}(w | h')
    P_0(w)     = 1 / V

c_n is the plain count at the highest order; below it, c_k(h w) = N1+(. h w), the number of distinct tokens seen
before h w (a continuation count: how many contexts a word completes, not how often it occurs). c_k(h .) sums
c_k(h w) over w, N_k(h .) counts the w with c_k(h w) > 0, and D_k = n_1 / (n_1 + 2 n_2) from the number of k-grams
whose count is 1 and 2 (Ney, Essen and Kneser 1994). A history never seen at order k leaves P_{k-1} unchanged.
Every order's terms sum to 1 over the vocabulary, so every P_k is a distribution.

Why not a library: nltk.lm computes each probability in Python through nested dicts, hours on a few million tokens;
KenLM estimates with its `lmplz` binary, which the PyPI wheels do not ship (they only query ARPA files), and it
reads whitespace-separated words. This module counts with numpy instead: every k-gram gets a dense id from
`np.unique` over (id of its (k-1)-gram prefix) * V + (last token), so fitting five orders on a few million tokens
takes seconds and scoring a held-out stream is a few vectorised look-ups per order.
"""

import numpy as np


class KneserNeyLM:
    """`fit(ids)` on a 1-D stream of training token ids; `token_nll(ids)` gives the NLL (nats) of every token of a
    held-out stream after the first; `next_token_probs(context)` the whole distribution after a context."""

    def __init__(self, vocab_size: int, order: int = 5):
        if isinstance(vocab_size, bool) or not isinstance(vocab_size, int) or vocab_size <= 0:
            raise ValueError(f"KneserNeyLM: vocab_size must be a positive integer, got {vocab_size!r}.")
        if isinstance(order, bool) or not isinstance(order, int) or order <= 0:
            raise ValueError(f"KneserNeyLM: order must be a positive integer (5 for a 5-gram), got {order!r}.")
        self.vocab_size, self.order = vocab_size, order
        self.orders: list[dict[str, np.ndarray]] = []

    # ------------------------------------------------------------------------------------------------ counting
    def _check_ids(self, ids) -> np.ndarray:
        ids = np.asarray(ids, dtype=np.int64).reshape(-1)
        if ids.size and (ids.min() < 0 or ids.max() >= self.vocab_size):
            raise ValueError(
                f"KneserNeyLM: token ids must be in [0, vocab_size={self.vocab_size}), got ids from {ids.min()} "
                f"to {ids.max()}."
            )
        return ids

    def fit(self, ids) -> "KneserNeyLM":
        ids = self._check_ids(ids)
        if ids.size < self.order:
            raise ValueError(f"KneserNeyLM.fit: {ids.size} training tokens, need at least order={self.order}.")
        V = self.vocab_size
        # k-gram ids at every position (the k-gram ending there; -1 where fewer than k tokens precede), and per
        # unique k-gram: its key (prefix id * V + word), plain count and the id of its suffix (k-1)-gram.
        ending = [None, ids]  # order 1: the token id is the unigram id
        grams = [None, {"key": np.arange(V), "count": np.bincount(ids, minlength=V), "suffix": np.zeros(V, np.int64)}]
        for k in range(2, self.order + 1):
            at = np.arange(k - 1, ids.size)
            keys = ending[k - 1][at - 1] * V + ids[at]
            unique, inverse = np.unique(keys, return_inverse=True)
            position_ids = np.full(ids.size, -1)
            position_ids[at] = inverse
            suffix = np.empty(unique.size, np.int64)
            suffix[inverse] = ending[k - 1][at]  # the k-gram minus its oldest token
            ending.append(position_ids)
            grams.append({"key": unique, "count": np.bincount(inverse, minlength=unique.size), "suffix": suffix})

        self.orders = [{"key": np.zeros(0, np.int64)}]  # index 0: the empty history
        for k in range(1, self.order + 1):
            if k == self.order:
                counts = grams[k]["count"]
            else:  # continuation counts: distinct (k+1)-grams that end with this k-gram
                counts = np.bincount(grams[k + 1]["suffix"], minlength=grams[k]["key"].size)
            history = grams[k]["key"] // V if k > 1 else np.zeros(grams[k]["key"].size, np.int64)
            num_histories = grams[k - 1]["key"].size if k > 1 else 1
            n1, n2 = np.count_nonzero(counts == 1), np.count_nonzero(counts == 2)
            discount = n1 / (n1 + 2 * n2) if n1 + 2 * n2 > 0 else 0.5
            self.orders.append(
                {
                    "key": grams[k]["key"],
                    "count": counts,
                    "discount": np.float64(min(max(discount, 1e-3), 0.999)),
                    "total": np.bincount(history, weights=counts, minlength=num_histories),  # c_k(h .)
                    "types": np.bincount(history, weights=(counts > 0).astype(float), minlength=num_histories),
                }
            )
        return self

    # ------------------------------------------------------------------------------------------------ scoring
    def _lookup(self, k: int, history: np.ndarray, words: np.ndarray) -> np.ndarray:
        """Id of the k-gram (history id, word) at order k, -1 where it was never seen (or the history is -1)."""
        if k == 1:
            return words.copy()
        keys = self.orders[k]["key"]
        if keys.size == 0:
            return np.full(words.shape, -1)
        query = history * self.vocab_size + words
        at = np.minimum(np.searchsorted(keys, query), keys.size - 1)
        return np.where((history >= 0) & (keys[at] == query), at, -1)

    def _probabilities(self, histories: list[np.ndarray], words: np.ndarray) -> np.ndarray:
        """P(word | history) per row; `histories[k]` holds each row's order-k history id (the (k-1)-gram before the
        word), -1 where that history is unknown or too long for the row."""
        p = np.full(words.shape, 1.0 / self.vocab_size)
        for k in range(1, self.order + 1):
            table, h = self.orders[k], histories[k]
            gram = self._lookup(k, h, words)
            h_safe = np.maximum(h, 0)
            total = np.where(h >= 0, table["total"][h_safe], 0.0)
            count = np.where(gram >= 0, table["count"][np.maximum(gram, 0)], 0)
            seen = total > 0
            safe_total = np.where(seen, total, 1.0)
            D = table["discount"]
            interpolated = np.maximum(count - D, 0.0) / safe_total + D * table["types"][h_safe] / safe_total * p
            p = np.where(seen, interpolated, p)
        return p

    def _histories(self, ids: np.ndarray) -> list[np.ndarray]:
        """For each position i >= 1 of a stream, its history id at every order (the (k-1)-gram ending at i-1)."""
        n = ids.size
        histories = [None, np.zeros(n - 1, np.int64)]  # order 1: the empty history
        previous = ids[:-1]  # unigram ids ending at i-1
        for k in range(2, self.order + 1):
            histories.append(previous)
            if k < self.order:  # the k-gram ending at i-1 becomes the history of order k+1
                extended = np.full(n - 1, -1)
                extended[1:] = self._lookup(k, previous[:-1], ids[1:-1])
                previous = extended
        return histories

    def token_nll(self, ids) -> np.ndarray:
        """The NLL (nats) of tokens 1..N-1 of a stream, each given up to order-1 tokens before it."""
        ids = self._check_ids(ids)
        if not self.orders:
            raise RuntimeError("KneserNeyLM: call fit() before scoring.")
        if ids.size < 2:
            return np.zeros(0)
        return -np.log(self._probabilities(self._histories(ids), ids[1:]))

    def next_token_probs(self, context) -> np.ndarray:
        """P(w | context) for every w in the vocabulary (the last order-1 tokens of the context are used)."""
        context = self._check_ids(context)[-(self.order - 1) :] if self.order > 1 else np.zeros(0, np.int64)
        words = np.arange(self.vocab_size)
        if context.size:  # the histories of a position appended after the context
            last = [h[-1] for h in self._histories(np.concatenate([context, [0]]))[1:]]
        else:
            last = [0] + [-1] * (self.order - 1)
        return self._probabilities([None] + [np.full(words.size, h) for h in last], words)

    def generate(self, context, max_new_tokens: int, seed: int = 0, eos_token_id: int | None = None) -> list[int]:
        """Sample a continuation of `context` (ancestral sampling from the model's distributions)."""
        rng = np.random.default_rng(seed)
        ids = list(self._check_ids(context))
        for _ in range(max_new_tokens):
            token = int(rng.choice(self.vocab_size, p=self.next_token_probs(ids)))
            ids.append(token)
            if token == eos_token_id:
                break
        return ids[len(context) :]


__all__ = ["KneserNeyLM"]
