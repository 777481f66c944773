"""Seeded randomness for workloads: token ids, lengths, and a text rendering of token ids.

Everything here is a pure function of its seed and labels. `random.Random` seeded with a
string hashes it with SHA-512 and its integer draws (`getrandbits`, `shuffle`) have been
stable across Python releases, unlike NumPy's `Generator`, whose streams may change between
NumPy versions; the sequence must not change when a dependency is upgraded.
"""

import math
import random
from array import array

from kvbench.api.workload import Length
from kvbench.loadgen.config import TokenSpace

__all__ = ["WORDS", "draw_length", "render_text", "rng_for", "token_ids"]

# Common English words of at most four letters: one token each (with the leading space) in
# the usual BPE vocabularies and in the simulator's stand-in tokenizer (pieces of up to four
# characters), so a text prompt of N words is N tokens, or very close, wherever it lands.
# Token id i is written as WORDS[i % 128].
_WORD_TEXT = (
    "the of and to in is you that it he was for on are as with his they at be this have "
    "from or one had by word but not what all were we when your can said use an each she "
    "do how if will up out many then them so some her make like him into time has look "
    "two more go see no way my than been call who oil its now find long down day did get "
    "come made may part over new take only work know year live me back give most very our "
    "just name good man say line too mean old any same tell boy end does set air well "
    "also play home read hand port even land here must big"
)
WORDS = tuple(_WORD_TEXT.split())


_N_WORDS = len(WORDS)


def rng_for(seed: int, *labels: object) -> random.Random:
    """An independent random stream for one purpose of one seed (e.g. 'prefix', 3)."""
    return random.Random("kvbench-loadgen/" + "/".join(str(x) for x in (seed, *labels)))


def token_ids(rng: random.Random, count: int, space: TokenSpace) -> list[int]:
    """`count` token ids drawn uniformly from the token space."""
    if count <= 0:
        return []
    raw = array("I", rng.getrandbits(32 * count).to_bytes(4 * count, "little"))
    span, low = space.high - space.low, space.low
    return [low + x % span for x in raw]


def render_text(ids: list[int]) -> str:
    """Token ids as words, one word per id, joined by spaces."""
    return " ".join([WORDS[i % _N_WORDS] for i in ids])


def draw_length(rng: random.Random, length: Length) -> int:
    """One length from the distribution, clipped to [min, max] (and to at least 1)."""
    if length.distribution == "fixed":
        value = float(length.mean)
    elif length.distribution == "uniform":
        assert length.min is not None and length.max is not None
        return rng.randint(length.min, length.max)
    elif length.distribution == "normal":
        assert length.stddev is not None
        value = rng.gauss(length.mean, length.stddev)
    else:
        # lognormal with the given mean and standard deviation of the length itself
        assert length.stddev is not None
        sigma2 = math.log(1 + (length.stddev / length.mean) ** 2)
        value = rng.lognormvariate(math.log(length.mean) - sigma2 / 2, math.sqrt(sigma2))
    low = length.min if length.min is not None else 1
    high = length.max if length.max is not None else math.inf
    return int(min(max(round(value), low, 1), high))
