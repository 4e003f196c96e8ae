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

Saved as the networks are, under transformers' method names: `save_pretrained(folder)` writes the counts, order by
order, as safetensors arrays (`ngram.safetensors`: `order_<k>.key`, the k-grams' sorted keys, and `order_<k>.count`,
their c_k) and the two numbers that shape them as JSON (`ngram_config.json`); `KneserNeyLM.from_pretrained(folder)`
reads them back and derives the rest (D_k, c_k(h .), N_k(h .)) as `fit` does. Neither file can hold code, and a
missing or damaged one is refused in one line that names it.
"""

import json
from pathlib import Path

import numpy as np

from hf_seq.errors import InvalidValueError, MissingFileError

CONFIG_NAME = "ngram_config.json"  # vocab_size and order, beside the counts
COUNTS_NAME = "ngram.safetensors"
MODEL_TYPE = "kneser_ney"


class KneserNeyLM:
    """`fit(ids)` on a 1-D stream of training token ids; `token_nll(ids)` gives the NLL (nats) of every token of a
    held-out stream after the first; `next_token_probs(context)` the whole distribution after a context; `backoff(ids)`
    how each of those probabilities is reached, order by order; `save_pretrained(folder)` and
    `KneserNeyLM.from_pretrained(folder)` keep the counts."""

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

        # the counts c_k: plain at the highest order, below it continuation counts, the number of distinct
        # (k+1)-grams that end with the k-gram
        counts = [np.bincount(grams[k + 1]["suffix"], minlength=grams[k]["key"].size) for k in range(1, self.order)]
        self.orders = self._tables([grams[k]["key"] for k in range(1, self.order + 1)], counts + [grams[-1]["count"]])
        return self

    def _tables(self, keys: list[np.ndarray], counts: list[np.ndarray]) -> list[dict[str, np.ndarray]]:
        """The tables scoring reads, from each order's sorted k-gram keys and their counts c_k (orders 1..n): per
        order k the keys and counts, D_k, and per history id h (the id of a (k-1)-gram) c_k(h .) and N_k(h .)."""
        tables = [{"key": np.zeros(0, np.int64)}]  # index 0: the empty history
        for k, (key, count) in enumerate(zip(keys, counts), start=1):
            history = key // self.vocab_size if k > 1 else np.zeros(key.size, np.int64)
            num_histories = keys[k - 2].size if k > 1 else 1
            n1, n2 = np.count_nonzero(count == 1), np.count_nonzero(count == 2)
            discount = n1 / (n1 + 2 * n2) if n1 + 2 * n2 > 0 else 0.5
            tables.append(
                {
                    "key": key,
                    "count": count,
                    "discount": np.float64(min(max(discount, 1e-3), 0.999)),
                    "total": np.bincount(history, weights=count, minlength=num_histories),  # c_k(h .)
                    "types": np.bincount(history, weights=(count > 0).astype(float), minlength=num_histories),
                }
            )
        return tables

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

    def _interpolate(self, k: int, history: np.ndarray, words: np.ndarray, below: np.ndarray) -> dict:
        """P_k(word | history) per row from P_{k-1} = `below`, with its terms (`backoff` names them); `history` holds
        each row's order-k history id, -1 where it is unknown or too long for the row."""
        table = self.orders[k]
        gram = self._lookup(k, history, words)
        h_safe = np.maximum(history, 0)
        total = np.where(history >= 0, table["total"][h_safe], 0.0)  # c_k(h .)
        count = np.where(gram >= 0, table["count"][np.maximum(gram, 0)], 0)  # c_k(h w)
        seen = total > 0
        safe_total = np.where(seen, total, 1.0)
        D = table["discount"]
        share = np.where(seen, np.maximum(count - D, 0.0) / safe_total, 0.0)
        weight = np.where(seen, D * table["types"][h_safe] / safe_total, 1.0)  # an unseen h hands on all of P_{k-1}
        terms = {"seen": seen, "count": count, "share": share, "backoff_weight": weight}
        return terms | {"probability": share + weight * below}

    def _probabilities(self, histories: list[np.ndarray], words: np.ndarray) -> np.ndarray:
        """P(word | history) per row; `histories[k]` holds each row's order-k history id (the (k-1)-gram before the
        word), -1 where that history is unknown or too long for the row."""
        p = np.full(words.shape, 1.0 / self.vocab_size)
        for k in range(1, self.order + 1):
            p = self._interpolate(k, histories[k], words, p)["probability"]
        return p

    def _histories(self, ids: np.ndarray) -> list[np.ndarray]:
        """For each position i >= 1 of a stream, its history id at every order (the (k-1)-gram ending at i-1)."""
        rows = max(ids.size - 1, 0)
        histories = [None, np.zeros(rows, np.int64)]  # order 1: the empty history
        previous = ids[:-1]  # unigram ids ending at i-1
        for k in range(2, self.order + 1):
            histories.append(previous)
            if k < self.order:  # the k-gram ending at i-1 becomes the history of order k+1
                extended = np.full(rows, -1)
                extended[1:] = self._lookup(k, previous[:-1], ids[1:-1])
                previous = extended
        return histories

    def _check_fitted(self, method: str) -> None:
        if not self.orders:
            raise RuntimeError(
                f"KneserNeyLM.{method}: the model holds no counts; call fit() or from_pretrained() first."
            )

    def token_nll(self, ids) -> np.ndarray:
        """The NLL (nats) of tokens 1..N-1 of a stream, each given up to order-1 tokens before it."""
        ids = self._check_ids(ids)
        self._check_fitted("token_nll")
        if ids.size < 2:
            return np.zeros(0)
        return -np.log(self._probabilities(self._histories(ids), ids[1:]))

    def backoff(self, ids) -> dict[str, np.ndarray]:
        """How P(w | h) of every token 1..N-1 of a stream is reached, order by order: from P_0 = 1/V up,

            P_k = share_k + backoff_weight_k * P_{k-1},
            share_k = max(c_k(h w) - D_k, 0) / c_k(h .)   (the discounted count's share),
            backoff_weight_k = D_k N_k(h .) / c_k(h .)    (the mass order k hands to P_{k-1}),

        h being the k-1 tokens before w; where the order-k history was never seen, share_k = 0 and backoff_weight_k
        = 1, so P_k = P_{k-1}. The same computation as `token_nll`, kept term by term.

        Returns arrays of shape (N-1, order), column k-1 for order k: `seen` (bool: c_k(h .) > 0), `count` (c_k(h w):
        the plain count at the highest order, the continuation count below), `share`, `backoff_weight` and
        `probability` (P_k; the last column is P(w | h) = exp(-token_nll(ids))); and `discount` (order,), each D_k."""
        ids = self._check_ids(ids)
        self._check_fitted("backoff")
        histories, words = self._histories(ids), ids[1:]
        p, columns = np.full(words.shape, 1.0 / self.vocab_size), []
        for k in range(1, self.order + 1):
            columns.append(self._interpolate(k, histories[k], words, p))
            p = columns[-1]["probability"]
        trace = {name: np.stack([c[name] for c in columns], 1) for name in columns[0]}  # (N-1, order) each
        return trace | {"discount": np.array([self.orders[k]["discount"] for k in range(1, self.order + 1)])}

    def next_token_probs(self, context) -> np.ndarray:
        """P(w | context) for every w in the vocabulary (the last order-1 tokens of the context are used)."""
        self._check_fitted("next_token_probs")
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

    # ------------------------------------------------------------------------------------------------ saving
    def save_pretrained(self, folder) -> None:
        """Write the counts to `folder/ngram.safetensors` (`order_<k>.key` and `order_<k>.count` for k = 1..order)
        and `vocab_size` and `order` to `folder/ngram_config.json`, creating the folder."""
        from safetensors.numpy import save_file

        self._check_fitted("save_pretrained")
        folder = Path(folder)
        folder.mkdir(parents=True, exist_ok=True)
        arrays = {}
        for k in range(1, self.order + 1):
            arrays[f"order_{k}.key"] = self.orders[k]["key"].astype(np.int64)
            arrays[f"order_{k}.count"] = self.orders[k]["count"].astype(np.int64)
        save_file(arrays, folder / COUNTS_NAME)
        config = {"model_type": MODEL_TYPE, "vocab_size": self.vocab_size, "order": self.order}
        (folder / CONFIG_NAME).write_text(json.dumps(config, indent=2) + "\n")

    @classmethod
    def from_pretrained(cls, folder) -> "KneserNeyLM":
        """The model `save_pretrained` wrote to `folder`, scoring exactly as it did. Reads JSON and safetensors only;
        a missing file is a MissingFileError, a damaged or inconsistent one an InvalidValueError, each naming the
        file and what is wrong with it."""
        folder = Path(folder)
        if not folder.is_dir():
            raise MissingFileError(f"KneserNeyLM.from_pretrained: folder={str(folder)!r} is not a folder.")
        config = _read_config(folder / CONFIG_NAME)
        lm = cls(config["vocab_size"], config["order"])
        keys, counts = _read_counts(folder / COUNTS_NAME, lm.vocab_size, lm.order)
        lm.orders = lm._tables(keys, counts)
        return lm


def _missing(path: Path, what: str) -> MissingFileError:
    return MissingFileError(
        f"KneserNeyLM.from_pretrained: {path} does not exist; the folder should hold {what}, as "
        "KneserNeyLM.save_pretrained writes it."
    )


def _read_config(path: Path) -> dict:
    """`ngram_config.json`: {"model_type": "kneser_ney", "vocab_size": V >= 1, "order": n >= 1}."""
    if not path.is_file():
        raise _missing(path, "the n-gram's vocab_size and order")
    try:
        config = json.loads(path.read_text())
    except (UnicodeDecodeError, json.JSONDecodeError) as error:
        raise InvalidValueError(f"KneserNeyLM.from_pretrained: {path} is not valid JSON ({error}).") from None
    if not isinstance(config, dict) or config.get("model_type") != MODEL_TYPE:
        got = config.get("model_type") if isinstance(config, dict) else type(config).__name__
        raise InvalidValueError(
            f"KneserNeyLM.from_pretrained: {path} has model_type={got!r}; an n-gram's config has {MODEL_TYPE!r}."
        )
    for name in ("vocab_size", "order"):
        value = config.get(name)
        if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
            raise InvalidValueError(
                f"KneserNeyLM.from_pretrained: {path} has {name}={value!r}; it must be a positive integer."
            )
    return config


def _read_counts(path: Path, vocab_size: int, order: int) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """Each order's keys and counts from `ngram.safetensors`, checked so that scoring can only index inside them:
    int64 vectors of one length per order, counts >= 0, keys strictly increasing (they are searched), order 1's the
    vocabulary 0..V-1, order k's = (id of an order-(k-1) key) * V + (a token id)."""
    from safetensors import SafetensorError
    from safetensors.numpy import load_file

    if not path.is_file():
        raise _missing(path, "the n-gram's counts")
    try:
        arrays = load_file(path)
    except (SafetensorError, OSError) as error:
        raise InvalidValueError(
            f"KneserNeyLM.from_pretrained: {path} is not a readable safetensors file ({error})."
        ) from None
    expected = [f"order_{k}.{part}" for k in range(1, min(order, len(arrays)) + 1) for part in ("key", "count")]
    if len(arrays) != 2 * order or set(arrays) != set(expected):
        raise InvalidValueError(
            f"KneserNeyLM.from_pretrained: {path} holds the arrays {sorted(arrays)}; a {order}-gram's counts are "
            f"order_<k>.key and order_<k>.count for k = 1..{order}."
        )
    keys, counts = [], []
    for k in range(1, order + 1):
        key, count = arrays[f"order_{k}.key"], arrays[f"order_{k}.count"]
        limit = vocab_size * (keys[-1].size if k > 1 else 1)  # every (history id, token) pair
        problem = None
        if key.dtype != np.int64 or count.dtype != np.int64 or key.ndim != 1 or key.shape != count.shape:
            problem = f"keys {key.dtype}{list(key.shape)} and counts {count.dtype}{list(count.shape)}"
        elif k == 1 and (key.size != vocab_size or (key != np.arange(vocab_size)).any()):
            problem = f"unigram keys that are not the vocabulary 0..{vocab_size - 1}"
        elif key.size and (key[0] < 0 or key[-1] >= limit or (np.diff(key) <= 0).any()):
            problem = f"keys outside [0, {limit}) or not strictly increasing"
        elif (count < 0).any():
            problem = "negative counts"
        if problem is not None:
            raise InvalidValueError(
                f"KneserNeyLM.from_pretrained: {path} has {problem} at order {k}; an order's keys and counts are int64 "
                "vectors of one length, the keys strictly increasing and below V times the number of keys an order "
                "down, the counts >= 0."
            )
        keys.append(key)
        counts.append(count)
    return keys, counts


__all__ = ["KneserNeyLM"]
